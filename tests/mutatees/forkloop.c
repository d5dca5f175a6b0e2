/* forkloop.c: one thread that forks all the time, as a shell running commands does. Each round
 * it calls `tick`, forks a child that allocates, runs a thread, calls `tick` and exits with the
 * round's number (mod 100), and waits for it. It runs until the file named by argv[1] exists,
 * then prints how many rounds ran and whether every child exited as it should. With a second
 * argument, `linger`, each child sleeps a second before it exits. Not in MUTATEES: run alone
 * it never ends. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))

volatile long ticks;

NOINLINE void tick(void) { ticks++; }

static void *in_thread(void *arg) {
    char *buf = malloc(4096);
    if (!buf)
        return NULL;
    memset(buf, 7, 4096);
    tick();
    long sum = 0;
    for (int i = 0; i < 4096; i++)
        sum += buf[i];
    free(buf);
    *(long *)arg = sum;
    return NULL;
}

static int linger;

static int child(long round) {
    if (linger)
        sleep(1);
    long sum = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, in_thread, &sum) != 0 || pthread_join(t, NULL) != 0)
        return 101;
    if (sum != 7 * 4096)
        return 102;
    return (int)(round % 100);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: forkloop STOP-FILE [linger]\n");
        return 2;
    }
    linger = argc == 3 && strcmp(argv[2], "linger") == 0;
    printf("ready\n");
    fflush(stdout);
    long rounds = 0, bad = 0;
    while (access(argv[1], F_OK) != 0) {
        tick();
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0)
            _exit(child(rounds));
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != rounds % 100) {
            bad++;
            printf("round %ld: child status %#x\n", rounds, status);
        }
        rounds++;
    }
    printf("%s after %s rounds\n", bad ? "children failed" : "every child exited as it should",
           rounds > 0 ? "some" : "no");
    return bad != 0;
}
