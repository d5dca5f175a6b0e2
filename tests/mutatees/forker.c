/* forker.c: forks a child that loads a library with dlopen (which calls the dynamic linker's
 * r_brk, where a tracer keeps an int3 that must not be left in the child) and exits 7; the
 * parent waits for it and reports its status. Deterministic output, exit 0. */
#include <dlfcn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        void *h = dlopen("libm.so.6", RTLD_NOW);
        printf("child loaded libm: %s\n", h ? "yes" : "no");
        return 7;
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (WIFEXITED(status))
        printf("parent saw child exit %d\n", WEXITSTATUS(status));
    else
        printf("parent saw child die by signal %d\n", WTERMSIG(status));
    return 0;
}
