/* plugin.c: loads a plugin library with dlopen after main starts, as servers load modules,
 * so that instrumentation waiting for the library must be inserted when it appears.
 * `plugin LIB` calls LIB's shared_add(i, i) for i in 0..99 and prints the sum; without LIB it
 * prints that there is none. Deterministic output, exit 0 (1 when LIB cannot be loaded). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("no plugin\n");
        return 0;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        printf("cannot load plugin: %s\n", dlerror());
        return 1;
    }
    int (*add)(int, int) = (int (*)(int, int))dlsym(h, "shared_add");
    if (!add) {
        printf("no shared_add in the plugin\n");
        return 1;
    }
    long sum = 0;
    for (int i = 0; i < 100; i++)
        sum += add(i, i);
    printf("plugin sum: %ld\n", sum);
    return 0;
}
