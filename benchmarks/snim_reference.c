/* Reference classic S-Nim solver (POJ 2960 / HDU 1536): the textbook solution, gcc -O2.
 *
 *   snim_reference < input.txt > answers.txt
 *
 * Input: test cases "k s1..sk", "m", then m lines "l h1..hl"; ends with k = 0 (or end of input).
 * Output: one line per test case, one W/L per position (W when the XOR of SG values is non-zero).
 *
 * Per test case: read the case, compute SG(0..max heap of the case) with the textbook loops
 * (moves sorted, a marks array cleared for every x, mex), then answer every position. The input
 * is read with one fread and parsed by hand, and the output written with one fwrite, so that the
 * reference is not slowed down by scanf/printf (a stronger reference than the usual scanf code).
 * Prints "solve_s=<seconds>" (parse + tables + answers, after the read, before the write) to
 * stderr.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *msg) {
    fprintf(stderr, "snim_reference: %s\n", msg);
    exit(1);
}

static unsigned char *buf;
static size_t len, pos;

/* Next non-negative integer; returns 0 at end of input. */
static int next(long *v) {
    while (pos < len && (buf[pos] == ' ' || (buf[pos] >= 9 && buf[pos] <= 13))) pos++;
    if (pos >= len) return 0;
    if (buf[pos] < '0' || buf[pos] > '9') die("malformed input (expected a non-negative integer)");
    long x = 0;
    while (pos < len && buf[pos] >= '0' && buf[pos] <= '9') x = x * 10 + (buf[pos++] - '0');
    *v = x;
    return 1;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    while (*cap < need) *cap = *cap ? *cap * 2 : 1024;
    p = realloc(p, *cap * size);
    if (!p) die("out of memory");
    return p;
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

int main(void) {
    size_t cap = 1 << 24;
    buf = malloc(cap);
    if (!buf) die("out of memory");
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, stdin)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) die("out of memory");
        }
    }
    double t0 = now();

    size_t out_cap = 0, out_len = 0, s_cap = 0, cnt_cap = 0, heaps_cap = 0, sg_cap = 0;
    char *out = NULL;
    long *s = NULL, *cnt = NULL, *heaps = NULL;
    int *sg = NULL;
    char *vis = NULL;
    long k, m, l, h;
    while (next(&k) && k != 0) {
        s = grow(s, &s_cap, k, sizeof(long));
        for (long j = 0; j < k; j++)
            if (!next(&s[j]) || s[j] < 1) die("bad move");
        qsort(s, k, sizeof(long), cmp_long);
        if (!next(&m)) die("missing m");
        cnt = grow(cnt, &cnt_cap, m, sizeof(long));
        size_t nh = 0;
        long maxh = 0;
        for (long q = 0; q < m; q++) {
            if (!next(&l)) die("missing l");
            cnt[q] = l;
            heaps = grow(heaps, &heaps_cap, nh + l, sizeof(long));
            for (long j = 0; j < l; j++) {
                if (!next(&h)) die("missing heap");
                heaps[nh++] = h;
                if (h > maxh) maxh = h;
            }
        }
        /* The textbook SG table of this case: SG(x) = mex { SG(x - s) }. */
        sg = grow(sg, &sg_cap, maxh + 1, sizeof(int));
        vis = realloc(vis, k + 2);
        if (!vis) die("out of memory");
        for (long x = 0; x <= maxh; x++) {
            memset(vis, 0, k + 2);
            for (long j = 0; j < k && s[j] <= x; j++) vis[sg[x - s[j]]] = 1;
            int g = 0;
            while (vis[g]) g++;
            sg[x] = g;
        }
        out = grow(out, &out_cap, out_len + m + 1, 1);
        size_t at = 0;
        for (long q = 0; q < m; q++) {
            int x = 0;
            for (long j = 0; j < cnt[q]; j++) x ^= sg[heaps[at++]];
            out[out_len++] = x ? 'W' : 'L';
        }
        out[out_len++] = '\n';
    }
    fprintf(stderr, "solve_s=%.6f\n", now() - t0);
    if (out_len && fwrite(out, 1, out_len, stdout) != out_len) die("cannot write the output");
    if (fflush(stdout) != 0) die("cannot write the output");
    return 0;
}
