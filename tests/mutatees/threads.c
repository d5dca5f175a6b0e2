/* threads.c: four pthreads each running the same worker, joined in order, so thread-aware
 * instrumentation (counts, $tid, per-thread timing) has something to see. Each worker sums
 * its own range; the output does not depend on scheduling.
 * Deterministic: always prints the same lines and exits 0. */
#include <pthread.h>
#include <stdio.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))
#define NTHREADS 4

__thread int tls_calls;
long results[NTHREADS];

NOINLINE long work_item(long i) {
    tls_calls++;
    return i * i % 7;
}

NOINLINE void *worker(void *arg) {
    long id = (long)arg;
    long total = 0;
    for (long i = id * 1000; i < (id + 1) * 1000; i++)
        total += work_item(i);
    results[id] = total + tls_calls;
    return NULL;
}

int main(void) {
    pthread_t threads[NTHREADS];
    for (long i = 0; i < NTHREADS; i++) {
        if (pthread_create(&threads[i], NULL, worker, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < NTHREADS; i++)
        printf("thread %d: %ld\n", i, results[i]);
    return 0;
}
