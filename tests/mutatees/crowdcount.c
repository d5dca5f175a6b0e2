/* crowdcount.c: more threads alive at once than a small runtime arena holds, each running the
 * counted function a known number of times. It prints "ready", waits until someone outside
 * sets `go` (gsh's tests write it through the tracer, after inserting a count on `tick`),
 * starts argv[1] threads (default 20) that each tick 100 times and then wait for all the
 * others (so no thread's block is free for another to take), joins them, ticks once more,
 * waits for `done` and says how many ticks there were: counting `tick` must give exactly
 * that. Not in MUTATEES: run alone it never ends. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))

volatile int go, done;
long ticks;
static pthread_barrier_t all;

NOINLINE void tick(void) { __atomic_fetch_add(&ticks, 1, __ATOMIC_RELAXED); }

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++)
        tick();
    pthread_barrier_wait(&all);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    if (n < 1 || n > 4096)
        return 1;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (!t || pthread_barrier_init(&all, NULL, (unsigned)n))
        return 1;
    printf("ready\n");
    fflush(stdout);
    while (!go)
        usleep(200);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, worker, NULL)) {
            perror("pthread_create");
            return 2;
        }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    tick();
    while (!done)
        usleep(200);
    printf("ticked %ld times\n", ticks);
    return 0;
}
