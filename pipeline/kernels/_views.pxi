# Arrow's string views, polars' own layout for text, as the kernels read them: `views` an
# (n, 4) int32 array (a text's length; then its bytes inline when at most 12, else a prefix,
# the index of its data buffer and its start there), `buffers` the data buffers. Included by
# the kernel modules that read texts where polars holds them.


cdef bint _views_out_of(const int32_t[:, ::1] views, const int64_t* sizes,
                        Py_ssize_t k) noexcept nogil:
    """Whether a view has a negative length or points past its data buffer."""
    cdef Py_ssize_t i
    cdef int64_t length, where
    for i in range(views.shape[0]):
        length = views[i, 0]
        if length > 12:
            where = views[i, 2]
            if where < 0 or where >= k or <uint32_t>views[i, 3] + length > sizes[where]:
                return True
        elif length < 0:
            return True
    return False


cdef const uint8_t** _view_buffers(const int32_t[:, ::1] views, list buffers,
                                   str caller) except NULL:
    """Where each of `buffers` starts, once every view is checked to lie within its buffer
    (else ValueError naming `caller`): the kernels then read the views as they are. The caller
    frees it, and keeps `buffers` alive while it is used."""
    cdef Py_ssize_t i, k = len(buffers)
    cdef const uint8_t[::1] buf
    cdef const uint8_t** starts = <const uint8_t**>malloc(max(k, 1) * sizeof(uint8_t*))
    cdef int64_t* sizes = <int64_t*>malloc(max(k, 1) * sizeof(int64_t))
    cdef bint out
    if starts == NULL or sizes == NULL:
        free(starts)
        free(sizes)
        raise MemoryError()
    try:
        for i in range(k):
            buf = buffers[i]
            sizes[i] = buf.shape[0]
            starts[i] = &buf[0] if buf.shape[0] else NULL
    except BaseException:
        free(starts)
        free(sizes)
        raise
    out = _views_out_of(views, sizes, k)
    free(sizes)
    if out:
        free(starts)
        raise ValueError(f"{caller}: a string view of a negative length or out of its buffers")
    return starts
