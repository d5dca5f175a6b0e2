/* bottleneck.c: a mutatee for the automated search (`consult`). A worker thread computes in
 * `crunch` for argv[1] seconds (default 8) while the main thread waits in poll() for it to
 * finish: one CPU-bound thread and one thread waiting outside. Prints one fixed line.
 * Not in MUTATEES: it runs for seconds. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noipa, used))

static volatile int done;
static double seconds = 8.0;
volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE unsigned long crunch(double until) {
    unsigned long x = 1;
    while (now() < until) {
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    }
    return x;
}

NOINLINE void *worker(void *arg) {
    (void)arg;
    sink = crunch(now() + seconds);
    done = 1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        seconds = atof(argv[1]);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    while (!done)
        poll(NULL, 0, 50);
    pthread_join(t, NULL);
    puts("crunched");
    return 0;
}
