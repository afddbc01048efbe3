"""The peers of ``bench_tileir.py``: Triton's tutorial kernels and cuTile Python equivalents of tilejit's examples.

Each builder imports its library when called and returns its kernels, so this module imports nothing heavy and a
missing library is the caller's "n/a (why)". The kernels compute what ``examples/`` compute, the same way: one
block (program) per row for softmax and layer norm with float32 statistics, one output tile per block for matmul
with float32 accumulation.

Triton has no tutorial for three of the row kernels, so these are written here in the structure of the nearest one:
the RMS norm forward (tutorial 05's layer norm forward without the mean and bias), the softmax backward (tutorial
02's fused softmax: one program per row, the whole row one block, its num_warps rule) and the RMS norm backward
(tutorial 05's layer norm backward without the mean and db: dx, dw partial rows under GROUP_SIZE_M spin locks, then
their column sums; its BLOCK_SIZE, num_warps and GROUP_SIZE_M rules).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

#: The Triton tutorial's CUDA autotune configs for matmul (BLOCK_SIZE_M, N, K, GROUP_SIZE_M, stages, warps).
TRITON_MATMUL_CONFIGS = (
    (128, 256, 64, 8, 3, 8),
    (64, 256, 32, 8, 4, 4),
    (128, 128, 32, 8, 4, 4),
    (128, 64, 32, 8, 4, 4),
    (64, 128, 32, 8, 4, 4),
    (128, 32, 32, 8, 4, 4),
    (64, 32, 32, 8, 5, 2),
    (32, 64, 32, 8, 5, 2),
)
#: The fixed config used without ``--triton-autotune``: the tutorial's first, good for bf16 on an H100.
TRITON_MATMUL_FIXED = TRITON_MATMUL_CONFIGS[0]


def triton_softmax_warps(block: int) -> int:
    """The fused-softmax tutorial's warps per row program: 4, 8 from 2048 columns, 16 from 4096."""
    return 16 if block >= 4096 else 8 if block >= 2048 else 4


def triton_layer_norm_block(n: int, itemsize: int) -> tuple[int, int]:
    """The layer-norm tutorial's (BLOCK_SIZE, num_warps) for rows of ``n`` elements of ``itemsize`` bytes: at most
    64 KB of a row per step (the kernel loops over wider rows; the tutorial's host code refuses them instead)."""
    block = min(65536 // itemsize, 1 << (n - 1).bit_length())
    return block, min(max(block // 256, 1), 8)


def triton_layer_norm_groups(n: int) -> int:
    """The layer-norm tutorial's GROUP_SIZE_M for its backward (rows share GROUP_SIZE_M locked partial rows):
    64, 96 up to 8192 columns, 128 up to 4096, 256 up to 1024."""
    return 256 if n <= 1024 else 128 if n <= 4096 else 96 if n <= 8192 else 64


def triton_kernels(autotune: bool = False) -> SimpleNamespace:
    """Triton's tutorial kernels: ``softmax`` (fused softmax, one row per program), ``layer_norm`` (layer norm
    forward, fused), ``layer_norm_bwd_dx`` and ``layer_norm_bwd_dwdb`` (its backward: dx with dw/db partial rows
    under a spin lock per group, then their column sums), ``matmul`` (grouped-order tile matmul; autotuned over the
    tutorial's configs when ``autotune``, else plain, given its config at launch) and ``add`` (vector add); and
    written here in their structure (no tutorial has them): ``rms_norm`` (RMS norm forward, as the layer norm's),
    ``softmax_bwd`` (softmax backward, as the fused softmax) and the RMS norm backward (the layer norm backward's
    two kernels with ``RMS=True``: no mean, no db)."""
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def softmax_bwd(dx_ptr, y_ptr, dy_ptr, stride, n_cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        # One program per row, as the fused softmax: dx = y * (dy - sum(y * dy)) in float32.
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        y = tl.load(y_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        dx = y * (dy - tl.sum(y * dy, axis=0))
        tl.store(dx_ptr + row * stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def layer_norm(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n, eps,  # type: ignore[no-untyped-def]
                   BLOCK: tl.constexpr):
        row = tl.program_id(0)
        y_ptr += row * stride
        x_ptr += row * stride
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, n, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / n
        acc2 = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, n, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)
            x = tl.where(cols < n, x - mean, 0.0)
            acc2 += x * x
        rstd = 1 / tl.sqrt(tl.sum(acc2, axis=0) / n + eps)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
        for off in range(0, n, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < n
            w = tl.load(w_ptr + cols, mask=mask)
            b = tl.load(b_ptr + cols, mask=mask)
            x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def layer_norm_bwd_dx(dx_ptr, dy_ptr, dw_ptr, db_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr,  # type: ignore[no-untyped-def]
                          lock_ptr, stride, n, GROUPS: tl.constexpr, BLOCK: tl.constexpr, RMS: tl.constexpr):
        # One program per row, the whole row one block. Its dw/db terms go into partial row (row % GROUPS) under
        # that row's spin lock; lock_ptr[GROUPS + g] says whether partial row g holds anything yet. The partial rows
        # are float32 here (the tutorial keeps them in x's dtype, which loses bf16/f16 dw over thousands of rows).
        # RMS: the RMS norm's backward (ours), the same without the mean and db (mean_ptr and db_ptr unused).
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        inside = cols < n
        x = tl.load(x_ptr + row * stride + cols, mask=inside, other=0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride + cols, mask=inside, other=0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=inside).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        if RMS:
            xhat = tl.where(inside, x * rstd, 0.0)
        else:
            xhat = tl.where(inside, (x - tl.load(mean_ptr + row)) * rstd, 0.0)
        wdy = tl.where(inside, w * dy, 0.0)
        c1 = tl.sum(xhat * wdy, axis=0) / n
        if RMS:
            dx = (wdy - xhat * c1) * rstd
        else:
            dx = (wdy - (xhat * c1 + tl.sum(wdy, axis=0) / n)) * rstd
        tl.store(dx_ptr + row * stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=inside)
        group = row % GROUPS
        lock = lock_ptr + group
        dw_row = dw_ptr + group * n + cols
        db_row = db_ptr + group * n + cols
        part_dw = dy * xhat
        part_db = dy
        while tl.atomic_cas(lock, 0, 1) == 1:
            pass
        filled = lock_ptr + GROUPS + group
        if tl.load(filled) == 0:
            tl.atomic_xchg(filled, 1)
        else:
            part_dw += tl.load(dw_row, mask=inside)
            if not RMS:
                part_db += tl.load(db_row, mask=inside)
        tl.store(dw_row, part_dw, mask=inside)
        if not RMS:
            tl.store(db_row, part_db, mask=inside)
        tl.debug_barrier()
        tl.atomic_xchg(lock, 0)

    @triton.jit
    def layer_norm_bwd_dwdb(dw_part, db_part, dw_ptr, db_ptr, groups, n,  # type: ignore[no-untyped-def]
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RMS: tl.constexpr):
        # One program per BLOCK_N columns: the column sums of the (groups, n) partial rows (RMS: dw's alone).
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc_w = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for first in range(0, groups, BLOCK_M):
            rows = first + tl.arange(0, BLOCK_M)
            inside = (rows[:, None] < groups) & (cols[None, :] < n)
            offs = rows[:, None] * n + cols[None, :]
            acc_w += tl.load(dw_part + offs, mask=inside, other=0.0)
            if not RMS:
                acc_b += tl.load(db_part + offs, mask=inside, other=0.0)
        tl.store(dw_ptr + cols, tl.sum(acc_w, axis=0).to(dw_ptr.dtype.element_ty), mask=cols < n)
        if not RMS:
            tl.store(db_ptr + cols, tl.sum(acc_b, axis=0).to(db_ptr.dtype.element_ty), mask=cols < n)

    @triton.jit
    def rms_norm(x_ptr, y_ptr, w_ptr, rstd_ptr, stride, n, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        squares = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, n, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0).to(tl.float32)
            squares += x * x
        rstd = 1 / tl.sqrt(tl.sum(squares, axis=0) / n + eps)
        tl.store(rstd_ptr + row, rstd)
        for off in range(0, n, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            inside = cols < n
            w = tl.load(w_ptr + cols, mask=inside)
            x = tl.load(x_ptr + row * stride + cols, mask=inside, other=0.0).to(tl.float32)
            tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K,  # type: ignore[no-untyped-def]
               stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
               GROUP_SIZE_M: tl.constexpr):
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)

    tuned = None
    if autotune:
        configs = [
            triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g},
                          num_stages=s, num_warps=w)
            for bm, bn, bk, g, s, w in TRITON_MATMUL_CONFIGS
        ]
        tuned = triton.autotune(configs=configs, key=["M", "N", "K"])(matmul)
    return SimpleNamespace(triton=triton, add=add, softmax=softmax, softmax_bwd=softmax_bwd, layer_norm=layer_norm,
                           layer_norm_bwd_dx=layer_norm_bwd_dx, layer_norm_bwd_dwdb=layer_norm_bwd_dwdb,
                           rms_norm=rms_norm, matmul=matmul, matmul_tuned=tuned)


def triton_softmax_bwd_launch(k: SimpleNamespace, y: Any, dy: Any, dx: Any) -> Any:
    """A no-argument function that runs ``softmax_bwd`` (torch tensors; one program per row with the fused-softmax
    tutorial's BLOCK and num_warps at every length, as the tutorial's forward runs: long rows spill)."""
    m, n = y.shape
    block = 1 << (n - 1).bit_length()

    def run() -> tuple[Any]:
        k.softmax_bwd[(m,)](dx, y, dy, y.stride(0), n, BLOCK=block, num_warps=triton_softmax_warps(block))
        return (dx,)

    return run


def triton_layer_norm_bwd_launch(k: SimpleNamespace, x: Any, dy: Any, w: Any, mean: Any, rstd: Any, dx: Any,
                                 dw: Any, db: Any) -> Any:
    """A no-argument function that runs the tutorial's layer norm backward (torch tensors; float32 ``mean`` and
    ``rstd`` of m elements): zeroed locks and partial rows, ``layer_norm_bwd_dx``, then ``layer_norm_bwd_dwdb``
    (32 x 128 tiles); or the text "n/a (why)" for rows over 64 KB, which the tutorial refuses. With ``mean`` and
    ``db`` None, the RMS norm's backward (``RMS=True``: x not centered, no db), returning (dx, dw)."""
    m, n = x.shape
    block, warps = triton_layer_norm_block(n, x.element_size())
    if n > block:
        return f"n/a (the tutorial's backward holds whole rows of at most {block} {str(x.dtype)[6:]} elements)"
    import torch

    rms = db is None
    groups = triton_layer_norm_groups(n)
    locks = torch.zeros(2 * groups, dtype=torch.int32, device=x.device)
    parts = [torch.zeros(groups, n, dtype=torch.float32, device=x.device) for _ in range(1 if rms else 2)]
    dw_part, db_part = parts[0], parts[-1]  # RMS: db's arguments are dw's, unused

    def run() -> tuple[Any, ...]:
        """The two kernels, after zeroing what the tutorial allocates zeroed on each call."""
        locks.zero_()
        for part in parts:
            part.zero_()
        k.layer_norm_bwd_dx[(m,)](dx, dy, dw_part, db_part, x, w, rstd if rms else mean, rstd, locks, x.stride(0), n,
                                  GROUPS=groups, BLOCK=block, RMS=rms, num_warps=warps)
        k.layer_norm_bwd_dwdb[(k.triton.cdiv(n, 128),)](dw_part, db_part, dw, dw if rms else db, min(groups, m), n,
                                                        BLOCK_M=32, BLOCK_N=128, RMS=rms)
        return (dx, dw) if rms else (dx, dw, db)

    return run


def triton_rms_norm_bwd_launch(k: SimpleNamespace, x: Any, dy: Any, w: Any, rstd: Any, dx: Any, dw: Any) -> Any:
    """A no-argument function that runs the RMS norm backward in the layer-norm tutorial's structure (torch tensors;
    float32 ``rstd`` of m elements; ``triton_layer_norm_bwd_launch`` without mean and db), or "n/a (why)"."""
    return triton_layer_norm_bwd_launch(k, x, dy, w, None, rstd, dx, dw, None)


def triton_matmul_launch(k: SimpleNamespace, a: Any, b: Any, c: Any) -> Any:
    """A no-argument function that runs the Triton matmul ``c = a @ b`` (autotuned when ``k.matmul_tuned``)."""
    m, kk = a.shape
    n = b.shape[1]
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if k.matmul_tuned is not None:
        tuned = k.matmul_tuned

        def grid(meta: dict[str, int]) -> tuple[int]:
            """One program per output tile of the config being run."""
            return (k.triton.cdiv(m, meta["BLOCK_SIZE_M"]) * k.triton.cdiv(n, meta["BLOCK_SIZE_N"]),)

        return lambda: tuned[grid](a, b, c, m, n, kk, *strides)
    bm, bn, bk, g, s, w = TRITON_MATMUL_FIXED
    fixed = (k.triton.cdiv(m, bm) * k.triton.cdiv(n, bn),)
    return lambda: k.matmul[fixed](a, b, c, m, n, kk, *strides, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
                                   GROUP_SIZE_M=g, num_stages=s, num_warps=w)
