# A stable merge sort of indices by key (numpy's argsort kind="mergesort"), callable
# without the GIL; included by the modules that sort, after _common.pxi.

cdef void _merge_sort(const any_int* keys, int64_t* idx, int64_t* tmp, int64_t lo,
                      int64_t hi) noexcept nogil:
    cdef int64_t i, j, q, v, mid
    if hi - lo <= 16:
        for i in range(lo + 1, hi):
            v = idx[i]
            q = i
            while q > lo and keys[idx[q - 1]] > keys[v]:
                idx[q] = idx[q - 1]
                q -= 1
            idx[q] = v
        return
    mid = lo + (hi - lo) // 2
    _merge_sort(keys, idx, tmp, lo, mid)
    _merge_sort(keys, idx, tmp, mid, hi)
    if keys[idx[mid - 1]] <= keys[idx[mid]]:
        return
    i = lo
    j = mid
    q = lo
    while i < mid and j < hi:
        if keys[idx[j]] < keys[idx[i]]:
            tmp[q] = idx[j]
            j += 1
        else:
            tmp[q] = idx[i]
            i += 1
        q += 1
    while i < mid:
        tmp[q] = idx[i]
        i += 1
        q += 1
    while j < hi:
        tmp[q] = idx[j]
        j += 1
        q += 1
    for q in range(lo, hi):
        idx[q] = tmp[q]


cdef int stable_argsort(const any_int* keys, int64_t n, int64_t* idx) noexcept nogil:
    """idx = the stable ascending order of keys[0:n]; -1 when out of memory."""
    cdef int64_t i
    cdef int64_t* tmp = <int64_t*>malloc(max(n, 1) * sizeof(int64_t))
    if tmp == NULL:
        return -1
    for i in range(n):
        idx[i] = i
    _merge_sort(keys, idx, tmp, 0, n)
    free(tmp)
    return 0
