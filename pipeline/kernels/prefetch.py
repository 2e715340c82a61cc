"""A cache prefetch hint for kernels: `prefetch(array, index)` asks the CPU to bring the
cache line of array[index] in while the kernel works on something else.

The SG lookups read one byte at a random place of ~10 MB of tables per heap, and waited on
memory for 85% of their time; fetching a row's heaps a few rows ahead hid most of that wait
(`benchmarks/kernel_times.py lookups`). A prefetch never faults, so an index past the array only
wastes the hint.
"""

from __future__ import annotations

from llvmlite import binding, ir
from numba.core import cgutils, types
from numba.extending import intrinsic

# LLVM 17 and later have opaque pointers only, and name the intrinsic by address space alone
_NAME = "llvm.prefetch.p0" if binding.llvm_version_info >= (17,) else "llvm.prefetch.p0i8"
_READ, _KEEP_IN_ALL_LEVELS, _DATA_CACHE = 0, 3, 1


@intrinsic
def prefetch(typingctx, array, index):  # noqa: ARG001 - numba's intrinsic signature
    """Hint that array[index] will be read soon."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        item = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]])
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), _NAME)
        builder.call(hint, [builder.bitcast(item, byte_pointer), i32(_READ),
                            i32(_KEEP_IN_ALL_LEVELS), i32(_DATA_CACHE)])
        return context.get_dummy_value()

    return types.void(array, index), codegen
