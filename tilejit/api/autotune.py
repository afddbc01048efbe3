"""``@tj.autotune``: launch a tile kernel with the fastest of several configs, as Triton's ``triton.autotune`` does.

A :class:`Config` is values for some of the kernel's constants plus performance hints. The first launch with a
new *tuning key* (the values of the ``key`` parameters: a scalar's value, an array's dtype and shape; and every
array argument's dtype) times each config on the GPU and keeps the fastest for that key; later launches with the
key go straight to it. Unlike Triton's, the choice is also kept in the disk cache (under the kernel's source
fingerprint, the key, the configs offered, the backend, the device's name and architecture, the driver's version
and tilejit's), so a new process launches it without timing anything; ``tilejit cache info`` lists these choices.

A config that fails to compile or launch (a tile too large for the registers or shared memory, a grid that does not
fit its cluster...) is skipped and logged (``logging.INFO`` on the ``tilejit.api.autotune`` logger); when all fail, an
:class:`~tilejit.errors.AutotuneError` names each config and why. Only such errors (``tj.TilejitError``) skip a
config: any other exception (from a grid function, a pruning function) propagates. Each timing takes about
``warmup`` + ``rep`` ms (``tilejit.runtime.bench.do_bench``); what tuning took is logged at debug level.

Between timed launches ``reset_to_zero`` arrays are zeroed and ``restore_value`` arrays get back the contents they
had before tuning, so an accumulating or in-place kernel is not corrupted by being launched many times: after
tuning, the launch the caller asked for sees ``restore_value`` arrays as they were and ``reset_to_zero`` arrays
zeroed (as Triton's). ``TILEJIT_AUTOTUNE=0`` launches the first config (after pruning) and times none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tilejit.api.compile import check_num_ctas, check_num_stages, check_num_warps, check_occupancy
from tilejit.api.kernel import _MEMO_LIMIT, Kernel, _read_text, _source_fingerprint
from tilejit.errors import AutotuneError, LaunchError, TilejitError
from tilejit.runtime.interop import ArrayView

log = logging.getLogger(__name__)

#: The kind and version of a tuned choice in the disk cache (``compiler.cache.TUNED_FOLDER``).
RECORD = "tilejit.autotune.v1"
_PRUNE_KEYS = frozenset({"perf_model", "top_k", "early_config_prune"})


class Config:
    """One way to launch an autotuned kernel: values of some of its constants (``kwargs``, passed to it by keyword)
    and performance hints, each None for the kernel's own setting. ``num_warps``: the CUDA backend's block size
    in warps of 32 threads (the kernel's ``num_threads``; the Tile IR backend, whose ``tileiras`` chooses the block
    size, ignores it); ``num_ctas``, ``occupancy`` and ``num_stages``: as ``@tj.kernel`` takes them (``num_stages``:
    the CUDA backend's cp.async pipeline depth; the Tile IR backend's tileiras chooses its own)."""

    __slots__ = ("kwargs", "num_ctas", "num_stages", "num_warps", "occupancy")

    kwargs: dict[str, Any]
    num_warps: int | None
    num_stages: int | None
    num_ctas: int | None
    occupancy: int | None

    def __init__(self, kwargs: Mapping[str, Any], *, num_warps: int | None = None, num_stages: int | None = None,
                 num_ctas: int | None = None, occupancy: int | None = None) -> None:
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"tj.Config: kwargs must be a dict of constant names to values, e.g. "
                            f"tj.Config({{'BLOCK': 128}}), got {type(kwargs).__name__}")
        for name, value in kwargs.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise TypeError(f"tj.Config: kwargs must be named by the kernel's constant parameters, got {name!r}")
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"tj.Config: the value of '{name}' must be hashable, as a constant's is, got "
                                f"{type(value).__name__}") from None
        self.kwargs = dict(kwargs)
        self.num_warps = None if num_warps is None else check_num_warps(num_warps, "tj.Config(num_warps=...)")
        self.num_stages = None if num_stages is None else check_num_stages(num_stages, "tj.Config(num_stages=...)")
        self.num_ctas = None if num_ctas is None else check_num_ctas(num_ctas, "tj.Config(num_ctas=...)")
        self.occupancy = None if occupancy is None else check_occupancy(occupancy, "tj.Config(occupancy=...)")

    def hints(self) -> dict[str, int]:
        """The performance hints that are set, by name."""
        return {name: v for name in ("num_warps", "num_stages", "num_ctas", "occupancy")
                if (v := getattr(self, name)) is not None}

    def all_kwargs(self) -> dict[str, Any]:
        """The constants' values and the hints that are set, in one dict (as Triton's ``Config.all_kwargs``)."""
        return {**self.kwargs, **self.hints()}

    def text(self) -> str | None:
        """A text naming this config alike in every process (part of a disk cache key), or None when a value has
        none (such a config's choice is not kept on disk)."""
        texts = [(name, _read_text(v)) for name, v in sorted(self.kwargs.items())]
        if any(t is None for _, t in texts):
            return None
        return ",".join([f"{name}={t}" for name, t in texts] + [f"{name}={v}" for name, v in self.hints().items()])

    def __str__(self) -> str:
        return ", ".join(f"{name}: {v}" for name, v in self.all_kwargs().items())

    def __repr__(self) -> str:
        return "tj.Config(" + ", ".join([repr(self.kwargs)] + [f"{k}={v}" for k, v in self.hints().items()]) + ")"

    def _identity(self) -> tuple[Any, ...]:
        return (tuple(sorted((k, v.__class__, v) for k, v in self.kwargs.items())), tuple(self.hints().items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


def _device_identity(device: Any) -> tuple[str, ...]:
    """What names the GPU in a tuned choice's key: its name, architecture and the driver's version."""
    from tilejit.runtime.device import initialized_driver

    return device.name, device.arch, f"driver {initialized_driver().version}"


def _backend_name(kernel: Kernel, device: Any) -> str:
    """The backend ``kernel``'s launches on ``device`` compile with (as ``Kernel._build`` chooses it)."""
    from tilejit.api.compile import backend_for

    return backend_for(kernel.backend, device.arch, num_threads=kernel.num_threads)


def _view_or_none(value: Any) -> ArrayView | None:
    """The ArrayView of a device array argument, or None for anything else (a scalar)."""
    from tilejit.runtime.dispatch import classify  # the launch's own classification

    try:
        v, _ = classify("", value)
    except LaunchError:
        return None
    return v if v.__class__ is ArrayView else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class Autotuner:
    """A ``@tj.kernel`` launched with the fastest of its ``configs`` for each tuning key: ``tuned[grid](args...)`` or
    ``tuned[grid, stream](args...)``, as the kernel itself, minus the constants the configs set. ``grid`` may be a
    function of the config's meta-parameters (every argument and ``Config.all_kwargs()`` by name), as in Triton:
    ``grid = lambda META: (tj.cdiv(n, META["BLOCK"]),)``."""

    def __init__(self, kernel: Kernel, configs: Iterable[Config], key: Iterable[str], *, warmup: float = 25.0,
                 rep: float = 100.0, reset_to_zero: Iterable[str] | None = None,
                 restore_value: Iterable[str] | None = None, prune_configs_by: Mapping[str, Any] | None = None,
                 do_bench: Callable[[Callable[[], None]], float] | None = None, cache_results: bool = True) -> None:
        self.kernel = kernel
        self.__name__ = kernel.__name__
        self.__doc__ = kernel.__doc__
        self.__wrapped__ = kernel.func
        where = f"tj.autotune(...) of {kernel.__name__}"
        self.configs = list(configs)
        if not self.configs:
            raise ValueError(f"{where}: configs is empty; give at least one tj.Config")
        for i, c in enumerate(self.configs):
            if not isinstance(c, Config):
                raise TypeError(f"{where}: configs[{i}] is {type(c).__name__}, not a tj.Config")
            for name in c.kwargs:
                if name not in kernel._constants:
                    what = "a run-time parameter" if name in kernel._params else "not a parameter"
                    raise ValueError(f"{where}: configs[{i}] ({c}) sets '{name}', {what} of {kernel.__name__}; configs "
                                     f"set constants (its tj.Constant parameters: {', '.join(kernel._constants)})")
        self._tuned = {name for c in self.configs for name in c.kwargs}
        self.keys = self._names(where, "key", key, kernel._params)
        for name in self.keys:
            if name in self._tuned:
                raise ValueError(f"{where}: key '{name}' is a constant the configs set; key on the arguments a "
                                 "caller passes")
        self.reset_to_zero = self._names(where, "reset_to_zero", reset_to_zero or (), kernel._args)
        self.restore_value = self._names(where, "restore_value", restore_value or (), kernel._args)
        for what, value in (("warmup", warmup), ("rep", rep)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{where}: {what} must be a number of milliseconds > 0, got {value!r}")
        self.warmup, self.rep = float(warmup), float(rep)
        prune = dict(prune_configs_by or {})
        if set(prune) - _PRUNE_KEYS:
            raise ValueError(f"{where}: prune_configs_by takes {', '.join(sorted(_PRUNE_KEYS))}; got "
                             f"{', '.join(sorted(set(prune) - _PRUNE_KEYS))}")
        self.perf_model: Callable[..., float] | None = prune.get("perf_model")
        self.early_config_prune: Callable[..., Iterable[Config]] | None = prune.get("early_config_prune")
        self.configs_top_k: int | float = prune.get("top_k", 1.0)
        top_k = self.configs_top_k
        if isinstance(top_k, bool) or not ((isinstance(top_k, int) and top_k >= 1)
                                           or (isinstance(top_k, float) and 0 < top_k <= 1)):
            raise ValueError(f"{where}: prune_configs_by['top_k'] must be an int >= 1 (configs kept) or a float in "
                             f"(0, 1] (the fraction kept), got {top_k!r}")
        if do_bench is not None and not callable(do_bench):
            raise TypeError(f"{where}: do_bench must be a function of a launch returning milliseconds, got "
                            f"{do_bench!r}")
        self.do_bench = do_bench
        self.cache_results = bool(cache_results)
        #: The config chosen for each tuning key: (device, key texts...) -> Config (Triton's ``cache``).
        self.cache: dict[tuple[Any, ...], Config] = {}
        self.best_config: Config | None = None  # the config of the last launch
        self.configs_timings: dict[Config, float | None] = {}  # of the last tuning: milliseconds, None if it failed
        self.bench_time: float | None = None  # seconds the last tuning took
        self._chosen: dict[tuple[Any, ...], tuple[Config, Kernel]] = {}
        self._variants: dict[tuple[int | None, int | None, int | None, int | None], Kernel] = {}
        self._fingerprint: str | None = None
        self._lock = threading.Lock()

    @staticmethod
    def _names(where: str, what: str, names: Iterable[str], allowed: list[str]) -> list[str]:
        """``names`` as a list, each one of ``allowed`` (the kernel's parameters of the kind ``what`` takes)."""
        if isinstance(names, str):
            raise TypeError(f"{where}: {what} must be a list of parameter names, e.g. {what}=[{names!r}]")
        out = list(names)
        for name in out:
            if name not in allowed:
                raise ValueError(f"{where}: {what} names '{name}', which is not one of its parameters that "
                                 f"{what} takes ({', '.join(allowed)})")
        return out

    def __repr__(self) -> str:
        return f"<tilejit.Autotuner of {self.kernel!r}, {len(self.configs)} configs, key={self.keys}>"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"launch an autotuned tile kernel with a grid: {self.__name__}[grid](...)")

    def __getitem__(self, item: object) -> Callable[..., None]:
        if isinstance(item, tuple) and len(item) == 2 and not hasattr(item[1], "__index__"):  # (grid, stream)
            grid, stream = item
        else:
            grid, stream = item, None

        def launch(*args: Any, **kwargs: Any) -> None:
            self._run(grid, stream, args, kwargs)

        launch.__name__ = launch.__qualname__ = self.__name__
        return launch

    # ------------------------------------------------------------------ launching

    def _run(self, grid: Any, stream: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Launch with the config chosen for this call's tuning key, choosing it first if the key is new."""
        from tilejit.runtime.device import get_device

        given = self._tuned.intersection(kwargs)
        if given:
            raise LaunchError(f"{self.__name__}(): {', '.join(sorted(given))} set by the autotuner's configs; do not "
                              "pass them")
        named = dict(zip(self.kernel._args, args))
        named.update(kwargs)
        device = get_device()
        key = (device, *self._key_of(named))
        choice = self._chosen.get(key)
        if choice is None:
            choice = self._choose(key, grid, stream, args, kwargs, named)
        config, variant = choice
        self.best_config = config
        self._launch_of(variant, config, grid, stream, named)(*args, **kwargs, **config.kwargs)

    def _key_of(self, named: dict[str, Any]) -> tuple[str, ...]:
        """The tuning key's texts: each ``key`` parameter's value (an array's dtype and shape), then every other
        array argument's dtype."""
        parts = []
        for name in self.keys:
            if name not in named:
                raise LaunchError(f"{self.__name__}() missing argument '{name}' (the autotuner's key)")
            value = named[name]
            view = _view_or_none(value)
            text = f"{view.dtype}{list(view.shape)}" if view is not None else _read_text(value)
            if text is None:
                raise LaunchError(f"{self.__name__}(): the autotuner's key '{name}' is a {type(value).__name__}, "
                                  "which has no stable value to key on; key on numbers, strings or arrays")
            parts.append(f"{name}={text}")
        for name in self.kernel._args:
            if name not in self.keys and name in named:
                view = _view_or_none(named[name])
                if view is not None:
                    parts.append(f"{name}={view.dtype}")
        return tuple(parts)

    def _launch_of(self, variant: Kernel, config: Config, grid: Any, stream: Any,
                   named: dict[str, Any]) -> Callable[..., None]:
        """``variant[grid]`` (``variant[grid, stream]``), a grid function called with the config's meta-parameters."""
        if callable(grid):
            grid = grid({**named, **config.all_kwargs()})
            if isinstance(grid, list):
                grid = tuple(grid)
        return variant[grid] if stream is None else variant[grid, stream]

    def _variant(self, config: Config, backend: str) -> Kernel:
        """The kernel with ``config``'s hints (the kernel itself when they are its own): one per set of hints,
        sharing the kernel's function, so each keeps its specializations and disk cache entries."""
        base = self.kernel
        threads = base.num_threads
        if config.num_warps is not None:
            if backend == "tileir":
                log.debug("autotune %s: num_warps=%d of %s ignored: the Tile IR backend's tileiras chooses the "
                          "block size", self.__name__, config.num_warps, config)
            else:
                threads = 32 * config.num_warps
        hints = (threads, base.num_ctas if config.num_ctas is None else config.num_ctas,
                 base.occupancy if config.occupancy is None else config.occupancy,
                 base.num_stages if config.num_stages is None else config.num_stages)
        if hints == (base.num_threads, base.num_ctas, base.occupancy, base.num_stages):
            return base
        variant = self._variants.get(hints)
        if variant is None:
            variant = self._variants[hints] = Kernel(base.func, num_threads=hints[0], backend=base.backend,
                                                     num_ctas=hints[1], occupancy=hints[2], num_stages=hints[3])
        return variant

    # ------------------------------------------------------------------ choosing

    def _choose(self, key: tuple[Any, ...], grid: Any, stream: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                named: dict[str, Any]) -> tuple[Config, Kernel]:
        """The config for a tuning key this process has not seen: the only one left after pruning, the first with
        ``TILEJIT_AUTOTUNE=0``, the one the disk cache holds, or the fastest of a tuning."""
        from tilejit import config as settings

        with self._lock:
            choice = self._chosen.get(key)
            if choice is not None:
                return choice
            device = key[0]
            configs = self.prune_configs(named)
            backend = _backend_name(self.kernel, device)
            if len(configs) == 1:
                config = configs[0]
            elif not settings.AUTOTUNE.get():
                config = configs[0]
                log.debug("autotune %s: %s=0: launching config 0 (%s) untimed", self.__name__,
                          settings.AUTOTUNE.name, config)
            else:
                record = self._record_key(key, backend)
                stored = self._stored(record, configs)
                if stored is None:
                    self._check_arguments(args, kwargs, configs[0])
                    config = self._tune(configs, key, backend, grid, stream, args, kwargs, named)
                    self._store(record, key, config)
                else:
                    config = stored
            choice = (config, self._variant(config, backend))
            if len(self._chosen) >= _MEMO_LIMIT:
                self._chosen.clear()
                self.cache.clear()
            self._chosen[key] = choice
            self.cache[key] = config
            return choice

    def prune_configs(self, named: dict[str, Any]) -> list[Config]:
        """The configs worth timing for a launch with the arguments ``named``: those ``early_config_prune(configs,
        named)`` keeps, then the ``top_k`` that ``perf_model(**named, **config.all_kwargs())`` deems fastest."""
        configs = self.configs
        if self.early_config_prune is not None:
            configs = list(self.early_config_prune(configs, named))
            if not configs:
                raise AutotuneError(f"tj.autotune of {self.__name__}: early_config_prune kept no config; it must "
                                    "keep at least one")
        top_k = self.configs_top_k
        keep = top_k if isinstance(top_k, int) else max(1, int(len(configs) * top_k))
        if self.perf_model is not None and len(configs) > keep:
            model = self.perf_model
            estimates = [model(**named, **c.all_kwargs()) for c in configs]
            configs = [c for _, _, c in sorted(zip(estimates, range(len(configs)), configs))][:keep]
        return configs

    def _check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any], config: Config) -> None:
        """Raise the launch's own ``LaunchError`` for arguments no config could take (missing, unknown, not an
        array), before any config is tried: so such a call is not every config's failure."""
        from tilejit.runtime.dispatch import classify

        run_args, _ = self.kernel._split(args, {**kwargs, **config.kwargs})
        for name, value in zip(self.kernel._args, run_args):
            classify(name, value)

    def _tune(self, configs: list[Config], key: tuple[Any, ...], backend: str, grid: Any, stream: Any,
              args: tuple[Any, ...], kwargs: dict[str, Any], named: dict[str, Any]) -> Config:
        """Time each config (``restore_value`` arrays put back and ``reset_to_zero`` ones zeroed before each
        launch, and once more after the last); the fastest, or an ``AutotuneError`` when every one fails."""
        from tilejit.runtime import snapshot

        device = key[0]
        started = time.perf_counter()
        saved = [snapshot.Snapshot(self._array(name, named), device, stream) for name in self.restore_value]
        zeroed = [self._array(name, named) for name in self.reset_to_zero]

        def before() -> None:
            for view in zeroed:
                snapshot.zero(view, device, stream)
            for s in saved:
                s.restore()

        times: list[float | None] = []
        failures: list[tuple[int, BaseException]] = []
        try:
            for i, config in enumerate(configs):
                launch = self._launch_of(self._variant(config, backend), config, grid, stream, named)
                try:
                    times.append(self._time(launch, args, {**kwargs, **config.kwargs}, before, stream, device))
                except TilejitError as exc:
                    times.append(None)
                    failures.append((i, exc))
                    log.info("autotune %s: config %d (%s) skipped: %s", self.__name__, i, config, _first_line(exc))
        finally:
            try:
                before()
            finally:
                for s in saved:
                    s.close()
        self.configs_timings = dict(zip(configs, times))
        self.bench_time = time.perf_counter() - started
        shown = ", ".join(key[1:]) or "()"
        timed = [(ms, i) for i, ms in enumerate(times) if ms is not None]
        if not timed:
            lines = [f"  config {i} ({configs[i]}): {_first_line(exc)}" for i, exc in failures]
            raise AutotuneError(f"tj.autotune of {self.__name__}: every config failed to compile or launch (key "
                                f"{shown}):\n" + "\n".join(lines), [(configs[i], exc) for i, exc in failures])
        best = configs[min(timed)[1]]
        log.debug("autotune %s: key %s: chose %s in %.3f s; %s", self.__name__, shown, best, self.bench_time,
                  "; ".join(f"{c}: {'failed' if ms is None else f'{ms:.4f} ms'}" for c, ms in zip(configs, times)))
        return best

    @staticmethod
    def _array(name: str, named: dict[str, Any]) -> ArrayView:
        """The view of the array argument ``name`` of ``reset_to_zero`` / ``restore_value``."""
        view = _view_or_none(named.get(name))
        if view is None:
            raise LaunchError(f"argument '{name}' (in the autotuner's reset_to_zero or restore_value) must be a "
                              f"device array, got {type(named.get(name)).__name__}")
        return view

    def _time(self, launch: Callable[..., None], args: tuple[Any, ...], kwargs: dict[str, Any],
              before: Callable[[], None], stream: Any, device: Any) -> float:
        """Milliseconds one launch takes: ``do_bench``'s (given to ``tj.autotune``, called with a function that
        runs ``before`` and the launch) or ``tilejit.runtime.bench.do_bench``'s, which keeps ``before`` untimed."""

        def call() -> None:
            launch(*args, **kwargs)

        if self.do_bench is not None:
            def with_before() -> None:
                before()
                call()

            return float(self.do_bench(with_before))
        from tilejit.runtime.bench import do_bench

        return do_bench(call, warmup=self.warmup, rep=self.rep, before=before, stream=stream, device=device)

    # ------------------------------------------------------------------ the disk cache

    def _record_key(self, key: tuple[Any, ...], backend: str) -> str | None:
        """The disk cache key of a tuned choice, or None when it is not kept on disk (caching off, a config with no
        stable text)."""
        from tilejit import __version__
        from tilejit import config as settings
        from tilejit.compiler.cache import cache_key

        texts = [t for c in self.configs if (t := c.text()) is not None]
        if not (self.cache_results and settings.CACHE.get()) or len(texts) < len(self.configs):
            return None
        if self._fingerprint is None:
            self._fingerprint = _source_fingerprint(self.kernel.func)
        base = self.kernel
        return cache_key(RECORD, __version__, self._fingerprint, base.func.__module__, base.func.__qualname__,
                         backend, f"{base.num_threads},{base.num_ctas},{base.occupancy}",
                         *_device_identity(key[0]), "\0".join(key[1:]), *texts)

    def _stored(self, record: str | None, configs: list[Config]) -> Config | None:
        """The config a tuning in an earlier process chose for this key, when it is one of ``configs``."""
        if record is None:
            return None
        from tilejit.compiler.cache import TUNED_FOLDER, default_cache

        entry = default_cache(TUNED_FOLDER).get(record)
        if entry is None or entry.get("record") != RECORD:
            return None
        text = entry.get("config_text")
        config = next((c for c in configs if c.text() == text), None)
        if config is not None:
            log.debug("autotune %s: %s, from the disk cache", self.__name__, config)
        return config

    def _store(self, record: str | None, key: tuple[Any, ...], config: Config) -> None:
        """Keep the chosen config in the disk cache (with what ``tilejit cache info`` shows of it)."""
        if record is None:
            return
        from tilejit.compiler.cache import TUNED_FOLDER, default_cache

        default_cache(TUNED_FOLDER).put(record, {
            "record": RECORD, "kernel": f"{self.kernel.func.__module__}.{self.kernel.func.__qualname__}",
            "key": list(key[1:]), "config": str(config), "config_text": config.text(), "when": time.time(),
            "device": _device_identity(key[0])[0], "tuning_seconds": self.bench_time,
            "timings": [[str(c), ms] for c, ms in self.configs_timings.items()],
        })


def autotune(configs: Iterable[Config], key: Iterable[str], *, warmup: float = 25.0, rep: float = 100.0,
             reset_to_zero: Iterable[str] | None = None, restore_value: Iterable[str] | None = None,
             prune_configs_by: Mapping[str, Any] | None = None,
             do_bench: Callable[[Callable[[], None]], float] | None = None,
             cache_results: bool = True) -> Callable[[Any], Autotuner]:
    """Decorate a ``@tj.kernel`` (or a plain function, made one) to launch with the fastest of ``configs`` for each
    value of the ``key`` parameters (an array's dtype and shape, a scalar's value).

    ``warmup``/``rep``: milliseconds of untimed and timed launches per config (``triton.testing.do_bench``'s);
    ``reset_to_zero``/``restore_value``: array parameters zeroed / put back before each timed launch;
    ``prune_configs_by``: ``{"early_config_prune": f(configs, named_args) -> configs, "perf_model":
    f(**args, **config.all_kwargs()) -> estimated time, "top_k": how many (int) or which fraction (float) to time}``;
    ``do_bench``: a function of a launch returning its milliseconds, in place of tilejit's;
    ``cache_results=False``: do not keep the choices in the disk cache."""
    configs = list(configs)
    key = key if isinstance(key, str) else list(key)

    def decorate(fn: Any) -> Autotuner:
        from tilejit.api.kernel import kernel as make_kernel

        if isinstance(fn, Autotuner):
            raise TypeError(f"tj.autotune: {fn.__name__} is autotuned already")
        k = fn if isinstance(fn, Kernel) else make_kernel(fn)
        return Autotuner(k, configs, key, warmup=warmup, rep=rep, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, prune_configs_by=prune_configs_by, do_bench=do_bench,
                         cache_results=cache_results)

    return decorate


__all__ = ["RECORD", "Autotuner", "Config", "autotune"]
