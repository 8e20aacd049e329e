/*
 * report_libucp(): prints "rank R libucp PATH" for the libucp.so.0 mapped in this process, read
 * from /proc/self/maps (the kernel's name for the mapped file, symbolic links resolved), or
 * "rank R libucp NONE". A process that maps two different libucp files gets two lines. Returns 0
 * if exactly one is mapped. run.sh compares PATH with the library it asked for.
 */
#ifndef RUCX_MPI_TESTS_LIBUCP_PATH_H
#define RUCX_MPI_TESTS_LIBUCP_PATH_H

#include <stdio.h>
#include <string.h>

static int report_libucp(int rank)
{
    char line[4096], found[8][1024];
    int n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        printf("rank %d libucp NONE (cannot open /proc/self/maps)\n", rank);
        return 1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *path = strchr(line, '/');
        if (path == NULL) {
            continue;
        }
        path[strcspn(path, "\n")] = '\0';
        if (strncmp(strrchr(path, '/') + 1, "libucp.so", 9) != 0) {
            continue;
        }
        int seen = 0;
        for (int i = 0; i < n; i++) {
            seen |= strcmp(found[i], path) == 0;
        }
        if (!seen && n < 8) {
            snprintf(found[n++], sizeof(found[0]), "%s", path);
        }
    }
    fclose(f);
    for (int i = 0; i < n; i++) {
        printf("rank %d libucp %s\n", rank, found[i]);
    }
    if (n == 0) {
        printf("rank %d libucp NONE\n", rank);
    }
    fflush(stdout);
    return n == 1 ? 0 : 1;
}

#endif
