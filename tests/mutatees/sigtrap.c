/* sigtrap.c: a program that manages SIGTRAP itself, as bash does. It installs its own SIGTRAP
 * handler (with sigaction, then signal), blocks SIGTRAP (sigprocmask, pthread_sigmask), runs
 * a handler whose mask blocks every signal, and meanwhile calls `tiny`, a 1-byte function
 * packed between two others that only a trap reaches. Its own SIGTRAPs (`raise` and a
 * genuine `int3`) must still reach its handler, and one it ignores must stay ignored.
 * Deterministic: always prints the same lines
 * and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

/* Top-level asm keeps the functions back to back: gcc would align each to 16 bytes. */
__asm__(".text\n"
        ".globl before_tiny\n"
        ".type before_tiny, @function\n"
        "before_tiny:\n"
        "  leal 1(%rdi), %eax\n"
        "  ret\n"
        ".size before_tiny, .-before_tiny\n"
        ".globl tiny\n"
        ".type tiny, @function\n"
        "tiny:\n"
        "  ret\n"
        ".size tiny, .-tiny\n"
        ".globl after_tiny\n"
        ".type after_tiny, @function\n"
        "after_tiny:\n"
        "  leal 2(%rdi), %eax\n"
        "  ret\n"
        ".size after_tiny, .-after_tiny\n"
        ".globl genuine_int3\n"
        ".type genuine_int3, @function\n"
        "genuine_int3:\n"
        "  int3\n"
        "  ret\n"
        ".size genuine_int3, .-genuine_int3\n");

int before_tiny(int);
void tiny(void);
int after_tiny(int);
void genuine_int3(void);
/* Called through a pointer, so no analysis takes the int3 for the end of main. */
static void (*volatile genuine)(void) = genuine_int3;

static volatile sig_atomic_t seen;

static void on_trap(int sig) {
    (void)sig;
    seen++;
}

static void on_usr1(int sig) {
    (void)sig;
    tiny();
}

NOINLINE int work(int n) {
    int sum = 0;
    for (int i = 0; i < n; i++) {
        tiny();
        sum = after_tiny(before_tiny(sum));
    }
    return sum;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_trap;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTRAP, &sa, NULL);
    struct sigaction now;
    sigaction(SIGTRAP, NULL, &now);
    printf("sigaction reports on_trap: %d\n", now.sa_handler == on_trap);
    printf("work(4) = %d\n", work(4));

    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    sigprocmask(SIG_BLOCK, &trap, NULL);
    printf("blocked: work(3) = %d\n", work(3));
    pthread_sigmask(SIG_SETMASK, &trap, NULL);
    printf("blocked again: work(2) = %d\n", work(2));
    sigprocmask(SIG_UNBLOCK, &trap, NULL);

    struct sigaction usr;
    memset(&usr, 0, sizeof usr);
    usr.sa_handler = on_usr1;
    sigfillset(&usr.sa_mask);
    sigaction(SIGUSR1, &usr, NULL);
    raise(SIGUSR1);

    raise(SIGTRAP);
    genuine();
    printf("SIGTRAPs the program saw: %d\n", (int)seen);
    printf("signal returns on_trap: %d\n", signal(SIGTRAP, SIG_DFL) == on_trap);
    signal(SIGTRAP, SIG_IGN);
    raise(SIGTRAP);
    tiny();
    printf("an ignored SIGTRAP is ignored\n");
    return 0;
}
