/* forkcount.c: a parent whose counted function runs a known number of times while ten forked
 * children run it a thousand times each. It prints "ready", waits until someone outside sets
 * `go` (gsh's tests write it through the tracer, after inserting a count on `tick`), ticks
 * once (so the main thread's counters exist before the forks and each child inherits them),
 * forks the children, ticks 49 more times and says so. Counting `tick` must give the parent's
 * 50, whatever the children did. Not in MUTATEES: run alone it never ends. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))

volatile int go;
volatile long ticks;

NOINLINE void tick(void) { ticks++; }

int main(void) {
    printf("ready\n");
    fflush(stdout);
    while (!go)
        usleep(200);
    tick();
    for (int i = 0; i < 10; i++) {
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            return 1;
        }
        if (child == 0) {
            for (int j = 0; j < 1000; j++)
                tick();
            _exit(0);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
            printf("child %d failed\n", i);
            return 2;
        }
    }
    for (int i = 0; i < 49; i++)
        tick();
    printf("parent ticked %ld times\n", ticks);
    return 0;
}
