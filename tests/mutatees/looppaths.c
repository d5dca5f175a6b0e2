/* looppaths.c: one loop, in a function reached by two call paths, hot along one of them, for
 * the search's loops along a call path (`consult`): a timer of the loop from every caller of
 * its function times the decoy path's activations too.
 * `looppaths [SECONDS]` prints `looppaths running`, computes for SECONDS (default 10), then
 * prints `looppaths done`.
 * `work` does all the computing, in its one loop. `crunch` calls it with five times the work
 * `cold` does: about 83% of the time is in the loop along main > crunch > work, 17% along the
 * decoy main > cold > work (well below CPUBound's 0.30: at a quarter, the samples of
 * main > cold read 0.30 in one search of a few at a load of 23, and it was a finding).
 * No call is a tail call (each caller adds the result).
 * Not in MUTATEES: it runs for seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noipa, used))

volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE unsigned long work(unsigned long n) {
    unsigned long x = n;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

NOINLINE void crunch(void) { sink += work(1000000) + 1; }

NOINLINE void cold(void) { sink += work(200000) + 1; }

int main(int argc, char **argv) {
    printf("looppaths running\n");
    fflush(stdout);
    double end = now() + (argc > 1 ? atof(argv[1]) : 10.0);
    while (now() < end) {
        crunch();
        cold();
    }
    printf("looppaths done\n");
    return 0;
}
