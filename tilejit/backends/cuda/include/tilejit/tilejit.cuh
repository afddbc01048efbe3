// tilejit device headers: everything a generated kernel includes.
#pragma once
#include <tilejit/types.cuh>
#include <tilejit/tile.cuh>
#include <tilejit/math.cuh>
#include <tilejit/memory.cuh>
#include <tilejit/layout.cuh>
#include <tilejit/reduce.cuh>
#include <tilejit/mma.cuh>
