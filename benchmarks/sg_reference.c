/* Reference SG table builder: the textbook algorithm, compiled with gcc -O2 by bench.py.
 *
 *   sg_reference MOVES_FILE OUT_BIN
 *
 * MOVES_FILE: first line "R N" (R rule sets, tables SG(0..N-1)), then R lines "k s1 .. sk".
 * For every rule set: SG(x) = mex { SG(x - s) : s in S, s <= x } for x = 0..N-1, with a marks
 * array cleared for every x (the textbook loops; moves sorted ascending, so the inner loop stops
 * at the first s > x). Only the building is timed (CLOCK_MONOTONIC), not reading or writing.
 *
 * Writes all tables as R*N bytes (rule r's table at offset r*N) to OUT_BIN and prints
 *   build_s=<seconds> checksum=<sum over i of value[i] * (i * 0x9E3779B97F4A7C15 + 1) mod 2^64>
 * which benchmarks/sg_ours.py computes identically.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *msg) {
    fprintf(stderr, "sg_reference: %s\n", msg);
    exit(1);
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) die("usage: sg_reference MOVES_FILE OUT_BIN");
    FILE *f = fopen(argv[1], "r");
    if (!f) die("cannot open the moves file");
    long R, N;
    if (fscanf(f, "%ld %ld", &R, &N) != 2 || R < 1 || N < 1) die("bad header");
    long *k = malloc(R * sizeof(long));
    long **moves = malloc(R * sizeof(long *));
    if (!k || !moves) die("out of memory");
    for (long r = 0; r < R; r++) {
        if (fscanf(f, "%ld", &k[r]) != 1 || k[r] < 1 || k[r] > 254) die("bad k");
        moves[r] = malloc(k[r] * sizeof(long));
        if (!moves[r]) die("out of memory");
        for (long j = 0; j < k[r]; j++)
            if (fscanf(f, "%ld", &moves[r][j]) != 1 || moves[r][j] < 1) die("bad move");
    }
    fclose(f);
    unsigned char *out = malloc((size_t)R * N);
    int *sg = malloc(N * sizeof(int));
    char *vis = malloc(256);
    if (!out || !sg || !vis) die("out of memory");

    double t0 = now();
    for (long r = 0; r < R; r++) {
        long kk = k[r];
        long *s = moves[r];
        qsort(s, kk, sizeof(long), cmp_long);
        for (long x = 0; x < N; x++) {
            memset(vis, 0, kk + 2);
            for (long j = 0; j < kk && s[j] <= x; j++) vis[sg[x - s[j]]] = 1;
            int g = 0;
            while (vis[g]) g++;
            sg[x] = g;
        }
        for (long x = 0; x < N; x++) out[r * N + x] = (unsigned char)sg[x];
    }
    double t1 = now();

    uint64_t checksum = 0;
    for (uint64_t i = 0; i < (uint64_t)R * N; i++)
        checksum += (uint64_t)out[i] * (i * 0x9E3779B97F4A7C15ULL + 1);
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(out, 1, (size_t)R * N, o) != (size_t)R * N || fclose(o) != 0)
        die("cannot write the output file");
    printf("build_s=%.6f checksum=%llu\n", t1 - t0, (unsigned long long)checksum);
    return 0;
}
