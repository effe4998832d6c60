/* The torch variant of fastlaunch.c's tensor reader: a tensor's metadata through torch's C++ API.
 *
 * Linked with fastlaunch.c (compiled with -DTKJIT_TORCH_READER) into the extension
 * tkjit_fastlaunch_torch by native.py, against torch's headers and libraries (libc10,
 * libtorch_python). For an instance of exactly torch.Tensor (or Parameter, which C++ treats as a
 * Tensor) it reads dtype, device index, contiguity, sizes and data pointer from the at::Tensor
 * itself instead of calling five Python attributes; the values and the acceptance are those of
 * the attributes (Tensor.get_device() is at::Tensor::get_device(), Tensor.is_contiguous() is
 * is_contiguous(), Tensor.stride() is strides(), Tensor.data_ptr() is data_ptr()). Anything else (a subclass, which may
 * override them) is left to fastlaunch.c's attribute reads. A C++ exception (a nested tensor's
 * sizes, a tensor without storage) refuses the argument, as the attribute's Python error does.
 */
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

extern "C" {

/* The at::ScalarType a torch.dtype stands for; -1 when `dtype` is not one. */
int tkjit_torch_scalar_type(PyObject *dtype) {
    if (!dtype || !THPDtype_Check(dtype))
        return -1;
    return static_cast<int>(reinterpret_cast<THPDtype *>(dtype)->scalar_type);
}

/* 1: accepted, contiguous (ptr and shape filled); 2: accepted as a view, which only a parameter
 * with `views` may be (its strides filled as well, in elements; fastlaunch.c judges them);
 * 0: refused; -2: not an exact tensor (read its attributes). */
int tkjit_torch_read_tensor(PyObject *obj, int scalar_type, long dev, int rank, int views, uint64_t *ptr,
                            long long *shape, long long *strides) {
    if (!THPVariable_CheckExact(obj))
        return -2;
    try {
        const at::Tensor &t = THPVariable_Unpack(obj);
        if (!t.defined() || static_cast<int>(t.scalar_type()) != scalar_type || t.get_device() != dev)
            return 0;
        int contiguous = t.is_contiguous();
        if (!contiguous && !views)
            return 0;
        c10::IntArrayRef sizes = t.sizes();
        if (static_cast<int>(sizes.size()) != rank)
            return 0;
        for (int j = 0; j < rank; j++)
            shape[j] = sizes[j];
        if (!contiguous) {
            c10::IntArrayRef st = t.strides();
            for (int j = 0; j < rank; j++)
                strides[j] = st[j];
        }
        *ptr = reinterpret_cast<uintptr_t>(t.data_ptr());
        return contiguous ? 1 : 2;
    } catch (...) {
        return 0;
    }
}

}  // extern "C"
