import timeit, operator, threading
exec(open("scratch/overhead.py").read().split("cases = {")[0])
memo = gelu_mul._local.memo
print(memo is not None, len(memo[5]))
fn, kargs = memo[5][0]
args = (x, y, b)
local = gelu_mul._local
def t(stmt, g):
    n = 50000
    return min(timeit.repeat(stmt, globals=g, number=n, repeat=5)) / n * 1e9
g = dict(fn=fn, kargs=kargs, args=args, memo=memo, operator=operator, local=local, gelu_mul=gelu_mul, x=x, y=y, b=b, o=o)
print("fn(*kargs)", t("fn(*kargs)", g))
print("local.memo", t("local.memo", g))
print("all is", t("all(map(operator.is_, args, memo[4]))", g))
print("full call", t("gelu_mul(x, y, b, out=o)", g))
def f(*args, out=None, stream=None, **kwargs): return out
g["f"] = f
print("empty py call", t("f(x, y, b, out=o)", g))
