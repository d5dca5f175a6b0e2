/* loops.c: the mutatee of `xtask bench-loops`. `loops MODE N` runs one shape and prints its
 * wall time in ns on the first line (what gsh's snippet at main's exit prints follows):
 *
 *   tight N    one call of `tight(N)`: a loop of N iterations, each a couple of cycles of work
 *              carried from one iteration to the next (nothing to vectorise or fold away);
 *   entries N  `two(i, 2)` called N times: a loop entered once per call that runs 2 iterations
 *              (the 2 comes from `argc`, so gcc cannot unroll the loop away);
 *   rdtsc N    N back-to-back pairs of `rdtsc`: the floor of a wall-clock timer per entry.
 *
 * `now()` reads the time-stamp counter for snippets that time a loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile unsigned long sink;

NOINLINE unsigned long now(void) { return __rdtsc(); }

NOINLINE unsigned long tight(unsigned long n) {
    unsigned long s = 0;
    for (unsigned long i = 0; i < n; i++)
        s += i ^ (s >> 3);
    return s;
}

NOINLINE unsigned long two(unsigned long seed, unsigned long k) {
    unsigned long s = seed;
    for (unsigned long i = 0; i < k; i++)
        s = s * 31 + i;
    return s;
}

static long long ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s tight|entries|rdtsc N\n", argv[0]);
        return 2;
    }
    unsigned long n = strtoul(argv[2], 0, 10);
    long long start = ns();
    if (strcmp(argv[1], "tight") == 0) {
        sink = tight(n);
    } else if (strcmp(argv[1], "entries") == 0) {
        unsigned long s = 0;
        for (unsigned long i = 0; i < n; i++)
            s += two(i, (unsigned long)argc - 1);
        sink = s;
    } else if (strcmp(argv[1], "rdtsc") == 0) {
        unsigned long total = 0;
        for (unsigned long i = 0; i < n; i++) {
            unsigned long t0 = __rdtsc();
            total += __rdtsc() - t0;
        }
        sink = total;
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    printf("%lld\n", ns() - start);
    return 0;
}
