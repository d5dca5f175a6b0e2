/* hotentry.c: a loop entered tens of millions of times a second, for `consult`'s cost control.
 * `hotentry [SECONDS]` prints `hotentry running`, computes for SECONDS (default 10) or until
 * SIGUSR1, then prints `hotentry done`.
 * `churn` is called once: its outer loop (loop_1) runs from the start to the end. On each
 * pass it runs loop_1.1, a few iterations long: entered on every pass, a timer of it costs more
 * than the loop itself. Every 8192nd pass it runs loop_1.2, long and entered rarely: a timer of
 * it costs nothing to speak of. Each holds about half the time.
 * Not in MUTATEES: it runs for seconds. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noipa, used))

volatile unsigned long sink;
static volatile unsigned trips = 3;
static volatile sig_atomic_t stop;

static void on_usr1(int sig) {
    (void)sig;
    stop = 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE unsigned long churn(double end) {
    unsigned long x = 1;
    for (unsigned long k = 1; !stop; k++) {
        /* loop_1.1: entered on every pass. */
        unsigned n = trips;
        for (unsigned i = 0; i < n; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        if ((k & 8191) == 0) {
            /* loop_1.2: entered rarely, long. */
            for (unsigned long j = 0; j < 20000; j++)
                x = (x ^ (x >> 7)) * 2862933555777941757UL + j;
            sink += x;
            if (now() >= end)
                break;
        }
    }
    return x;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    signal(SIGUSR1, on_usr1);
    printf("hotentry running\n");
    fflush(stdout);
    sink += churn(now() + seconds);
    printf("hotentry done\n");
    return 0;
}
