/* decoypaths.c: one hot function reached by two call paths that end in the same call, only
 * one of them hot, for the search's call-path (iPath) refinement (`consult`): a timer of the
 * last call alone (`time common call leaf`) cannot tell them apart.
 * `decoypaths [SECONDS]` prints `decoypaths running`, computes for SECONDS (default 10), then
 * prints `decoypaths done as NAME`, NAME the base name of its argv[0] (the path it was started
 * through).
 * `leaf` does all the computing, always called from `common`. `heavy` calls `common` with six
 * times the work `light` does: about 85% of the time is on the path
 * main > heavy > common > leaf, 15% on the decoy main > light > common > leaf.
 * No call is a tail call (each caller adds the result).
 * Not in MUTATEES: it runs for seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noipa, used))

volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE unsigned long leaf(unsigned long n) {
    unsigned long x = n;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

NOINLINE unsigned long common(unsigned long n) { return leaf(n) + 1; }

NOINLINE void heavy(void) { sink += common(1200000); }

NOINLINE void light(void) { sink += common(200000); }

int main(int argc, char **argv) {
    printf("decoypaths running\n");
    fflush(stdout);
    double end = now() + (argc > 1 ? atof(argv[1]) : 10.0);
    while (now() < end) {
        heavy();
        light();
    }
    const char *name = strrchr(argv[0], '/');
    printf("decoypaths done as %s\n", name ? name + 1 : argv[0]);
    return 0;
}
