/* stalewait.c: a thread that calls a function gsh counts, which returns, and then waits in
 * `read` in a function whose stack buffer, never written where the read does not reach, covers
 * the stack the counted calls used: whatever a trampoline and gsh's runtime left there (old
 * return addresses into them) stays while the thread waits, as in an interactive shell. A
 * second thread wakes the first every few milliseconds through a pipe; each round sums
 * `work(i)` for i < 100 and checks the sum. It runs until the file named by argv[1] exists,
 * then prints how many rounds ran and whether every sum was right. Not in MUTATEES: run alone
 * it never ends. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))

static int wake[2];
static volatile int stop;

NOINLINE long work(long i) { return i * 3 + 1; }

/* A level between main and `work`, so the counted calls' stack lies below what `main`'s own
 * calls (`write`, `access`) reach. */
NOINLINE long round_sum(void) {
    volatile char pad[256];
    pad[0] = 0;
    long sum = pad[0];
    for (long i = 0; i < 100; i++)
        sum += work(i);
    return sum;
}

/* Waits for a byte from the waker: `buf` covers the stack `round_sum` and `work` used, and the
 * read writes only its first byte. */
NOINLINE long wait_for_wake(void) {
    char buf[32768];
    ssize_t n = read(wake[0], buf, 1);
    return n == 1 ? buf[0] : -1;
}

static void *waker(void *arg) {
    (void)arg;
    struct timespec ts = {0, 5 * 1000 * 1000};
    while (!stop) {
        nanosleep(&ts, NULL);
        if (write(wake[1], "w", 1) != 1)
            break;
    }
    close(wake[1]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: stalewait STOP-FILE\n");
        return 2;
    }
    if (pipe(wake) != 0)
        return 3;
    pthread_t t;
    if (pthread_create(&t, NULL, waker, NULL) != 0)
        return 4;
    printf("ready\n");
    fflush(stdout);
    long rounds = 0, bad = 0;
    while (access(argv[1], F_OK) != 0) {
        if (wait_for_wake() != 'w')
            break;
        if (round_sum() != 100 * 99 / 2 * 3 + 100)
            bad++;
        rounds++;
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("%s after %s rounds\n", bad == 0 ? "every sum was right" : "A SUM WAS WRONG",
           rounds > 10 ? "more than ten" : "few");
    return 0;
}
