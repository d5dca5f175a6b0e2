/* libslowinit.c: a library whose constructor takes a second (SLOWINIT_SECONDS in the
 * environment says how many), saying on stdout when it starts and when it ends, so a test can
 * kill or interrupt the debugger that `dlopen`s it in the middle of the injected call. */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((constructor)) static void slow_init(void) {
    static const char started[] = "constructor\n", ended[] = "constructed\n";
    if (write(1, started, sizeof started - 1) < 0)
        return;
    const char *secs = getenv("SLOWINIT_SECONDS");
    struct timespec left = {secs ? atoi(secs) : 1, 0};
    while (nanosleep(&left, &left) != 0) {
    }
    if (write(1, ended, sizeof ended - 1) < 0)
        return;
}
