"""backends/cuda"""
