/* server.c: a stand-in for a long-running server that gsh attaches to, instruments while it
 * runs, and detaches from. `server THREADS ROUNDS` runs THREADS workers (1 to 8), each
 * handling ROUNDS requests with a 1 ms pause between them, then prints one line per worker
 * and a total. The output depends only on the arguments, never on timing or instrumentation.
 * Deterministic: always prints the same lines for the same arguments and exits 0. With a
 * third argument, a path, the workers go on handling requests after their ROUNDS (not counted
 * in the output) until that file exists (or about a minute more has passed): a test then keeps
 * the process alive as long as it needs it, however slowly it runs under load. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))
#define MAX_WORKERS 8

struct request {
    long id;
    long len;
};

long handled[MAX_WORKERS];
int debug_level = 0;
static long rounds = 100;
static const char *until;
/* At most this many rounds more (about a minute): a test that failed before creating the file
 * leaves no server behind for long. */
#define EXTRA 60000

/* Small, so that it is also a target for the short-function tactics. */
NOINLINE long checksum(long x) { return (x * 2654435761L) % 1000003; }

NOINLINE long parse_header(struct request *r, long limit) {
    return r->len > limit ? limit : r->len;
}

NOINLINE long handle_request(struct request *r) {
    long n = parse_header(r, 4096);
    return checksum(r->id + n);
}

NOINLINE void *worker(void *arg) {
    long w = (long)arg;
    long sum = 0;
    struct timespec pause = {0, 1000000};
    for (long i = 0; i < rounds || (until && i < rounds + EXTRA && access(until, F_OK) != 0);
         i++) {
        struct request r = {w * 1000000 + i, (i * 37) % 8192};
        long v = handle_request(&r);
        if (i < rounds)
            sum = (sum + v) % 1000000007;
        nanosleep(&pause, NULL);
    }
    handled[w] = sum;
    return NULL;
}

int main(int argc, char **argv) {
    long workers = argc > 1 ? atol(argv[1]) : 1;
    if (argc > 2)
        rounds = atol(argv[2]);
    if (argc > 3)
        until = argv[3];
    if (workers < 1 || workers > MAX_WORKERS) {
        fprintf(stderr, "usage: server THREADS(1-8) ROUNDS\n");
        return 2;
    }
    pthread_t threads[MAX_WORKERS];
    for (long i = 1; i < workers; i++)
        pthread_create(&threads[i], NULL, worker, (void *)i);
    worker((void *)0);
    for (long i = 1; i < workers; i++)
        pthread_join(threads[i], NULL);
    long total = 0;
    for (long i = 0; i < workers; i++) {
        printf("worker %ld: %ld\n", i, handled[i]);
        total += handled[i];
    }
    printf("total: %ld\n", total);
    return 0;
}
