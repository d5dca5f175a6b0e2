/* live.c: a mutatee for live-process control. It prints "ready", then N threads (argv[1],
 * default 1, the main thread included) spin on `counter` with short sleeps until someone
 * outside sets `stop` (gsh's tests write it through the tracer). Then it prints fixed lines,
 * so a test can check that halting, injecting and detaching changed nothing, and that
 * signals sent to it arrived (SIGUSR1 is counted).
 * Not in MUTATEES: run alone it never ends. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))
#define MAXTHREADS 16

volatile long counter;
volatile int stop;
volatile int usr1;

static void on_usr1(int sig) {
    (void)sig;
    usr1++;
}

NOINLINE long add3(long a, long b, long c) { return a + b * 10 + c * 100; }

NOINLINE void *spin(void *arg) {
    (void)arg;
    while (!stop) {
        __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        usleep(200);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > MAXTHREADS)
        n = 1;
    signal(SIGUSR1, on_usr1);
    pthread_t threads[MAXTHREADS];
    for (int i = 1; i < n; i++)
        if (pthread_create(&threads[i], NULL, spin, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    printf("ready\n");
    fflush(stdout);
    spin(NULL);
    for (int i = 1; i < n; i++)
        pthread_join(threads[i], NULL);
    printf("%d threads stopped\n", n);
    printf("add3(1, 2, 3) = %ld\n", add3(1, 2, 3));
    if (usr1)
        printf("SIGUSR1 x %d\n", usr1);
    return 0;
}
