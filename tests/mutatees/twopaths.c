/* twopaths.c: one hot function reached by two call paths, only one of them hot, for the
 * search's call-path (iPath) refinement (`consult`). `twopaths [SECONDS]` computes for SECONDS
 * (default 10), then prints `twopaths done`.
 * `hot` does all the computing. `hot_caller` calls it with six times the work `cold_caller`
 * does: about 85% of the time is on the path main > hot_caller > hot, 15% on
 * main > cold_caller > hot. Neither call is a tail call (each caller adds the result).
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

NOINLINE unsigned long hot(unsigned long n) {
    unsigned long x = n;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

NOINLINE void hot_caller(void) { sink += hot(1200000); }

NOINLINE void cold_caller(void) { sink += hot(200000); }

int main(int argc, char **argv) {
    double end = now() + (argc > 1 ? atof(argv[1]) : 10.0);
    while (now() < end) {
        hot_caller();
        cold_caller();
    }
    printf("twopaths done\n");
    return 0;
}
