/* libslowinit.c: a library whose constructor takes a second, saying on stdout when it starts
 * and when it ends, so a test can kill the debugger that `dlopen`s it in the middle of the
 * injected call. */
#include <time.h>
#include <unistd.h>

__attribute__((constructor)) static void slow_init(void) {
    static const char started[] = "constructor\n", ended[] = "constructed\n";
    if (write(1, started, sizeof started - 1) < 0)
        return;
    struct timespec left = {1, 0};
    while (nanosleep(&left, &left) != 0) {
    }
    if (write(1, ended, sizeof ended - 1) < 0)
        return;
}
