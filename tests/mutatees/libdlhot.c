/* libdlhot.c: the library `dlhot` loads with dlopen once a tracer has attached. Its `hot`
 * computes until *stop is set, on each pass of its outer loop (loop_1) running a short loop
 * (loop_1.1) and a long one (loop_1.2) that takes nearly all the time. */
#define NOINLINE __attribute__((noipa, used))

volatile unsigned long lib_sink;

NOINLINE void hot(volatile int *stop) {
    unsigned long x = 1;
    while (!*stop) {
        for (unsigned long i = 0; i < 2000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        lib_sink += x;
        for (unsigned long i = 0; i < 80000; i++)
            x = (x ^ (x >> 7)) * 2862933555777941757UL + i;
        lib_sink += x;
    }
}
