# The script `cargo run --release -p xtask -- whole-program python3` runs with the original and
# the rewritten python3: deterministic output that exercises much of the interpreter.
import json
import math
import re
from collections import Counter, OrderedDict
from fractions import Fraction


class Shape:
    def area(self):
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.area():.4f})"


class Circle(Shape):
    def __init__(self, r):
        self.r = r

    def area(self):
        return math.pi * self.r * self.r


class Rect(Shape):
    def __init__(self, w, h):
        self.w, self.h = w, h

    def area(self):
        return self.w * self.h


def primes(limit):
    sieve = bytearray([1]) * (limit + 1)
    sieve[0:2] = b"\0\0"
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return (i for i, v in enumerate(sieve) if v)


def main():
    ps = list(primes(200000))
    print("primes:", len(ps), ps[-5:])
    print("factorial(300) digits:", len(str(math.factorial(300))))
    print("2**4000 mod 1000007:", pow(2, 4000, 1000007))
    words = re.findall(r"[a-z]+", (__doc__ or "") + " ".join(str(p) for p in ps[:50]) + " the quick brown fox jumps over the lazy dog " * 200)
    print("words:", Counter(words).most_common(3))
    shapes = [Circle(i / 7) if i % 2 else Rect(i, i / 3) for i in range(1, 2000)]
    shapes.sort(key=lambda s: s.area())
    print("shapes:", shapes[:2], shapes[-1:])
    data = {"name": "gsh", "values": [i * i for i in range(1000)], "nested": OrderedDict(a=1, b=[1.5, None, True])}
    text = json.dumps(data, sort_keys=True)
    back = json.loads(text)
    print("json:", len(text), back["values"][999], back["nested"])
    print("fraction:", sum(Fraction(1, n) for n in range(1, 60)))
    d = {}
    for i in range(200000):
        d[str(i % 5000)] = d.get(str(i % 5000), 0) + i
    print("dict:", len(d), sum(d.values()))
    try:
        Shape().area()
    except NotImplementedError as e:
        print("exception:", type(e).__name__)
    print("format:", "{:>10.3e}|{:<6}|{:^8}".format(12345.6789, "ab", "mid"))
    print("sorted strings:", sorted(("zeta", "alpha", "Beta", "gamma"), key=str.lower))


main()
