import time, sys, os, traceback
import numpy as np
t0 = time.time()
import tilejit as tj
print("backend env", os.environ.get("TILEJIT_BACKEND"))

@tj.fuse
def gelu_mul(x, y, bias):
    g = 0.5 * x * (1 + tj.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
    return g * y + bias

def ref_gelu(x, y, b):
    g = 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
    return g * y + b

rng = np.random.default_rng(0)
def check(name, got, want, tol):
    got = np.asarray(got, np.float64); want = np.asarray(want, np.float64)
    err = np.max(np.abs(got - want)) if got.size else 0
    ok = got.shape == want.shape and err <= tol
    print(("OK  " if ok else "BAD ") + name, got.shape, want.shape, err)

try:
    x = rng.standard_normal((300, 1000)).astype(np.float32); y = rng.standard_normal((300, 1000)).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    dx, dy, db = tj.asarray(x), tj.asarray(y), tj.asarray(b)
    t = time.time(); r = gelu_mul(dx, dy, db); tj.Device(0).synchronize(); print("first call", time.time() - t)
    check("gelu bias", r.numpy(), ref_gelu(x, y, b), 1e-5)
    r = gelu_mul(dx, dy, dy); check("gelu flat", r.numpy(), ref_gelu(x, y, y), 1e-5)
    # strided / transposed / negative
    dxt = tj.asarray(np.ascontiguousarray(x.T))  # (1000, 300)
    r = gelu_mul(dxt[::-1, :], 1.5, 0.25); check("gelu neg stride", r.numpy(), ref_gelu(x.T[::-1], 1.5, 0.25), 1e-5)
    # out= poisoned
    out = tj.full((300, 1000), np.nan, "float32")
    gelu_mul(dx, dy, db, out=out); check("out=", out.numpy(), ref_gelu(x, y, b), 1e-5)
    # reductions
    @tj.fuse
    def rs(x, y):
        return (x * y).sum(axis=1), tj.max(x * y, axis=1), (x * y).mean(axis=1)
    r = rs(dx, dy)
    check("rowsum", r[0].numpy(), (x.astype(np.float64) * y).sum(1), 1e-3)
    check("rowmax", r[1].numpy(), (x * y).max(1), 1e-6)
    check("rowmean", r[2].numpy(), (x.astype(np.float64) * y).mean(1), 1e-5)
    @tj.fuse
    def tot(x):
        return tj.sum(x * x)
    r = tot(dx); check("total split", r.numpy(), (x.astype(np.float64) ** 2).sum(), 1e-1)
    @tj.fuse
    def cols(x):
        return x.sum(axis=0)
    r = cols(dx); check("colsum", r.numpy(), x.astype(np.float64).sum(0), 1e-3)
    # torch
    try:
        import torch
        tx = torch.from_numpy(x).cuda(); ty = torch.from_numpy(y).cuda(); tb = torch.from_numpy(b).cuda()
        r = gelu_mul(tx, ty, tb); torch.cuda.synchronize(); print(type(r)); check("torch", r.cpu().numpy(), ref_gelu(x, y, b), 1e-5)
        tbx = tx.bfloat16(); r = gelu_mul(tbx, tbx, tb.bfloat16()); print(r.dtype)
        # launch overhead
        out = torch.empty_like(tx)
        for _ in range(100): gelu_mul(tx, ty, tb, out=out)
        torch.cuda.synchronize(); t = time.perf_counter(); n = 2000
        for _ in range(n): gelu_mul(tx, ty, tb, out=out)
        torch.cuda.synchronize(); print("per call us (torch, out=)", (time.perf_counter() - t) / n * 1e6)
        @tj.kernel
        def hand(x, y, b, out, n1: tj.int32, bs: tj.int32):
            pid = tj.bid(0)
            xv = tj.load(x, index=(pid,), shape=(4096,))
            tj.store(out, index=(pid,), tile=xv)
        xf, yf, of = tx.view(-1), ty.view(-1), out.view(-1)
        g = tj.cdiv(xf.numel(), 4096)
        for _ in range(100): hand[g](xf, yf, tb, of, 1000, 1)
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n): hand[g](xf, yf, tb, of, 1000, 1)
        torch.cuda.synchronize(); print("per call us (hand kernel)", (time.perf_counter() - t) / n * 1e6)
    except ImportError:
        print("no torch")
except Exception:
    traceback.print_exc()
print("total", time.time() - t0)
