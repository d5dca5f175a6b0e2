/* trapspin.c: threads that keep running into a function only a trap site can instrument, for
 * the tests of what gsh's jobs do to a running process. `trapspin THREADS` starts THREADS
 * workers (1 to 8), prints "ready" once they run, and lets them loop until its standard input
 * ends; each iteration calls `tiny_ret`, a lone 1-byte `ret` packed between two functions
 * (as in traps.c: with `count tiny_ret`, an int3 that the tracer must serve on every call),
 * adds 3 through two small functions, and sleeps 100 us. Then it prints one line per worker
 * saying whether its sum is right (3 per iteration) and exits 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_WORKERS 8

/* Top-level asm keeps the functions back to back: gcc would align each to 16 bytes. */
__asm__(".text\n"
        ".globl before_tiny\n"
        ".type before_tiny, @function\n"
        "before_tiny:\n"
        "  leaq 1(%rdi), %rax\n"
        "  ret\n"
        ".size before_tiny, .-before_tiny\n"
        ".globl tiny_ret\n"
        ".type tiny_ret, @function\n"
        "tiny_ret:\n"
        "  ret\n"
        ".size tiny_ret, .-tiny_ret\n"
        ".globl after_tiny\n"
        ".type after_tiny, @function\n"
        "after_tiny:\n"
        "  leaq 2(%rdi), %rax\n"
        "  ret\n"
        ".size after_tiny, .-after_tiny\n");

long before_tiny(long);
void tiny_ret(void);
long after_tiny(long);

static volatile int stop;
static long sums[MAX_WORKERS], iterations[MAX_WORKERS];

static void *worker(void *arg) {
    long w = (long)arg;
    long sum = 0, n = 0;
    struct timespec pause = {0, 100000};
    while (!stop) {
        tiny_ret();
        sum = after_tiny(before_tiny(sum));
        n++;
        nanosleep(&pause, NULL);
    }
    sums[w] = sum;
    iterations[w] = n;
    return NULL;
}

int main(int argc, char **argv) {
    long workers = argc > 1 ? atol(argv[1]) : 1;
    if (workers < 1 || workers > MAX_WORKERS) {
        fprintf(stderr, "usage: trapspin THREADS(1-8)\n");
        return 2;
    }
    pthread_t threads[MAX_WORKERS];
    for (long i = 0; i < workers; i++)
        pthread_create(&threads[i], NULL, worker, (void *)i);
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    stop = 1;
    for (long i = 0; i < workers; i++)
        pthread_join(threads[i], NULL);
    for (long i = 0; i < workers; i++)
        printf("worker %ld: %s\n", i, sums[i] == 3 * iterations[i] ? "ok" : "wrong");
    return 0;
}
