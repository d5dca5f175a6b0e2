/* dlhot.c: `dlhot LIBRARY` prints `dlhot running` and computes in main until a tracer has been
 * attached (it sees one, or SIGUSR2 says so) for half a second (so a search that attached has
 * begun), then loads LIBRARY
 * (libdlhot) with dlopen and calls its `hot` until SIGUSR1, and prints `dlhot done`.
 * For `consult` on libraries loaded after the search began. Not in MUTATEES: it runs until
 * told to stop. */
#include <dlfcn.h>
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

/* A tracer that lets the program run hands-off traces it only while it is stopped: the program
 * itself may never see TracerPid set, and the one who attached it says so. */
static volatile sig_atomic_t told;

static void on_usr2(int sig) {
    (void)sig;
    told = 1;
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

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dlhot LIBRARY\n");
        return 2;
    }
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);
    printf("dlhot running\n");
    fflush(stdout);
    double since = 0;
    while (!stop && (since == 0 || now() < since + 0.5)) {
        unsigned long x = 1;
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005UL + 1;
        sink += x;
        if (since == 0 && (told || traced()))
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
