/* mallocloop.c: a mutatee of one thread that spends nearly all its time inside glibc's
 * malloc and free (which take no lock while a process has one thread), for the test that an
 * injected call never runs inside them. It prints "ready", then allocates and frees blocks of
 * varied sizes until someone outside sets `stop`; then it checks every block it holds, frees
 * them and prints "heap intact". A corrupted heap aborts it or crashes it instead.
 * Not in MUTATEES: run alone it never ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP 64

volatile int stop;

int main(void) {
    static unsigned char *keep[KEEP];
    static unsigned sizes[KEEP];
    unsigned long i = 0;
    printf("ready\n");
    fflush(stdout);
    while (!stop) {
        unsigned k = (unsigned)((i * 2654435761u) % KEEP);
        free(keep[k]);
        sizes[k] = 16 + (unsigned)((i * 40503u) % 3000);
        keep[k] = malloc(sizes[k]);
        if (!keep[k]) return 3;
        memset(keep[k], (int)(k + 1), sizes[k]);
        i++;
    }
    for (unsigned k = 0; k < KEEP; k++) {
        for (unsigned j = 0; keep[k] && j < sizes[k]; j++) {
            if (keep[k][j] != (unsigned char)(k + 1)) {
                printf("block %u corrupted\n", k);
                return 2;
            }
        }
        free(keep[k]);
    }
    printf("heap intact\n");
    return 0;
}
