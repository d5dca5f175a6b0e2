/* hotloop.c: one function whose time goes to the second of three loops, and a decoy, for the
 * loop-aware search (`consult`). `hotloop [SECONDS]` prints `hotloop running`, computes for
 * SECONDS (default 10) or until SIGUSR1, then prints `hotloop done`.
 * `phases` is called once: its outer loop (loop_1) runs from the start to the end, and on each
 * pass runs three loops in turn. The first and third are short; the second (loop_1.2, around
 * loop_1.2.1) takes nearly all the time. `decoy`, called on each pass, costs a tenth of it.
 * Not in MUTATEES: it runs for seconds. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noipa, used))

volatile unsigned long sink;
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

NOINLINE unsigned long decoy(unsigned long n) {
    unsigned long x = n;
    for (unsigned long i = 0; i < 4 * n; i++)
        x = x * 6364136223846793005UL + 1;
    return x;
}

NOINLINE void phases(unsigned long n, double end) {
    unsigned long x = n;
    while (!stop && now() < end) {
        /* loop_1.1: short. */
        for (unsigned long i = 0; i < n; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        sink += x;
        /* loop_1.2 and loop_1.2.1 inside it: the hot spot, 40 times the others. */
        for (unsigned long j = 0; j < 20; j++) {
            for (unsigned long i = 0; i < 2 * n; i++)
                x = (x ^ (x >> 7)) * 2862933555777941757UL + j;
            sink += x;
        }
        /* loop_1.3: short. */
        for (unsigned long i = 0; i < n; i++)
            x = x * 3935559000370003845UL + 2691343689449507681UL;
        sink += x + decoy(n);
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    signal(SIGUSR1, on_usr1);
    printf("hotloop running\n");
    fflush(stdout);
    phases(20000, now() + seconds);
    printf("hotloop done\n");
    return 0;
}
