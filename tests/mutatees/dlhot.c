/* dlhot.c: `dlhot LIBRARY` prints `dlhot running` and computes in main until a tracer has been
 * attached for half a second (so a search that attached has begun), then loads LIBRARY
 * (libdlhot) with dlopen and calls its `hot` until SIGUSR1, and prints `dlhot done`.
 * For `consult` on libraries loaded after the search began. Not in MUTATEES: it runs until
 * told to stop. */
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;
volatile unsigned long sink;

static void on_usr1(int sig) {
    (void)sig;
    stop = 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* True once some process traces this one. */
static int traced(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int yes = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "TracerPid:", 10) == 0)
            yes = atoi(line + 10) != 0;
    if (f)
        fclose(f);
    return yes;
}

/* True once a tracer has hooked the dynamic linker's r_brk (gsh's jump, or an int3). The hook
 * stays while gsh lets the process run untraced (hands-off), where TracerPid is 0 but for the
 * moments of a stack sample or an insertion, which this single thread may never see. */
static int hooked(void) {
    unsigned char b = *(volatile unsigned char *)_r_debug.r_brk;
    return b == 0xe9 || b == 0xcc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dlhot LIBRARY\n");
        return 2;
    }
    signal(SIGUSR1, on_usr1);
    printf("dlhot running\n");
    fflush(stdout);
    double since = 0;
    while (!stop && (since == 0 || now() < since + 0.5)) {
        unsigned long x = 1;
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005UL + 1;
        sink += x;
        if (since == 0 && (hooked() || traced()))
            since = now();
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    void (*hot)(volatile int *) = h ? (void (*)(volatile int *))dlsym(h, "hot") : NULL;
    if (!hot) {
        fprintf(stderr, "dlhot: %s\n", dlerror());
        return 1;
    }
    hot(&stop);
    printf("dlhot done\n");
    return 0;
}
