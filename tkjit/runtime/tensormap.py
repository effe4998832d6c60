"""TMA tensor maps for kernel launches: encoded on the host, cached, passed by value.

A kernel-metadata parameter entry of kind ``tensormap`` (the Hopper backend writes them, after
the tensors, scalars and named dims of the launch ABI) says which tensor argument a map
describes (``param``, its index), the ``box`` it copies (elements, innermost first), the
``swizzle`` (bytes: 0, 32, 64 or 128) and the ``dtype``; ``fallback`` says that the kernel
copies the tensor without TMA when its rows are not a multiple of 16 bytes (it checks that
itself), so such a tensor gets an all-zero map it never reads. At launch the map of the tensor's
pointer and shape is encoded with ``cuTensorMapEncodeTiled`` and its 128 bytes are copied into
a 64-byte-aligned buffer (cuda-python's own CUtensorMap object sits at an address = 48 mod 64,
and a tensor-map parameter must be 64-byte aligned). Maps are cached per (pointer, shape), so
a repeated launch costs one dict lookup per map.

A contiguous tensor's global dims are the shape reversed and the strides follow from it; a
strided view (``encoder.strided``: the launcher's path for views, runtime/strides.py) gives its
own, cached per (pointer, shape, strides). TMA refuses what it cannot address, and so does this
module, before the GPU sees it, with a LaunchError naming the argument: a base address that is
not 16-byte aligned, rows (every stride) that are not a multiple of 16 bytes (unless the kernel
has the fallback); for a view, the refusal names the dimension and its stride.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

from ..errors import LaunchError, RowsNotAligned, TkError
from .strides import tma_refusal

MAP_BYTES = 128
MAP_ALIGN = 64
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}
SWIZZLES = (0, 32, 64, 128)
MAX_BOX = 256
CACHE_ENTRIES = 256
"""Maps kept per tensor-map parameter; the oldest goes first."""


@dataclass(frozen=True)
class MapSpec:
    """One tensor-map parameter: which argument it describes and how it is copied."""

    name: str
    param: int
    tensor: str
    dtype: str
    box: tuple[int, ...]
    swizzle: int
    fallback: bool = False


def parse_entry(entry: dict, num_params: int) -> MapSpec:
    """A metadata entry → MapSpec; TkError when the metadata is malformed."""
    name = entry.get("name", "tensormap")
    param, dtype, box, swizzle = entry.get("param"), entry.get("dtype"), entry.get("box"), entry.get("swizzle")
    if not isinstance(param, int) or not 0 <= param < num_params:
        raise TkError(f"kernel metadata: tensor map '{name}' names argument {param!r}; tensor maps "
                      f"describe one of the {num_params} arguments")
    if dtype not in ELEMENT_BYTES:
        raise TkError(f"kernel metadata: tensor map '{name}' has unsupported dtype {dtype!r}")
    if swizzle not in SWIZZLES:
        raise TkError(f"kernel metadata: tensor map '{name}' has swizzle {swizzle!r}; expected one of {SWIZZLES}")
    if not (isinstance(box, list) and 1 <= len(box) <= 5
            and all(isinstance(b, int) and 1 <= b <= MAX_BOX for b in box)):
        raise TkError(f"kernel metadata: tensor map '{name}' has a bad box {box!r} (1 to 5 sizes in [1, 256])")
    inner = box[0] * ELEMENT_BYTES[dtype]
    if inner % 16 or (swizzle and inner > swizzle):
        raise TkError(f"kernel metadata: tensor map '{name}': an inner box of {inner} bytes must be a "
                      f"multiple of 16{f' and at most the {swizzle}-byte swizzle span' if swizzle else ''}")
    fallback = entry.get("fallback", False)
    if not isinstance(fallback, bool):
        raise TkError(f"kernel metadata: tensor map '{name}' has fallback {fallback!r}; expected true or false")
    return MapSpec(name, param, str(entry.get("tensor", f"arg{param}")), dtype, tuple(box), swizzle, fallback)


def _driver_encode(spec: MapSpec, ptr: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> bytes:
    """cuTensorMapEncodeTiled through cuda-python: the map's 128 bytes (innermost dim first)."""
    from . import driver
    cu = driver.cu()
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    dtypes = {"bf16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
              "f16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
              "f32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
              "e4m3": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,   # TMA moves bytes
              "e5m2": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8}
    swizzles = {0: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
                128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}
    err, tmap = cu.cuTensorMapEncodeTiled(
        dtypes[spec.dtype], len(dims), ptr, [u64(d) for d in dims], [u64(s) for s in strides],
        [u32(b) for b in spec.box], [u32(1)] * len(dims),
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzles[spec.swizzle],
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err:
        raise driver.driver_error(err, f"cuTensorMapEncodeTiled for '{spec.name}' (dims {list(dims)}, "
                                       f"strides {list(strides)}, box {list(spec.box)})")
    return ctypes.string_at(tmap.getPtr(), MAP_BYTES)


Encode = Callable[[MapSpec, int, tuple, tuple], bytes]


class TensorMapEncoder:
    """``encoder(ptr, *shape)`` → the address of an aligned 128-byte buffer holding the map.

    ``encode`` (tests inject one) turns (spec, pointer, dims innermost first, byte strides of
    dims 1..) into 128 bytes; the default calls the driver."""

    def __init__(self, spec: MapSpec, where: str, encode: Encode | None = None,
                 capacity: int = CACHE_ENTRIES):
        self.spec = spec
        self.where = where
        self.encode = encode or _driver_encode
        self.capacity = capacity
        self.cache: dict[tuple, tuple[int, ctypes.Array]] = {}

    def __call__(self, ptr: int, *shape: int) -> int:
        hit = self.cache.get((ptr, shape))
        if hit is not None:
            return hit[0]
        return self._miss(ptr, shape)

    def strided(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
        """The map of a strided view: ``strides`` in elements, one per dimension (the last 1;
        runtime/strides.effective's), cached per (pointer, shape, strides)."""
        key = (ptr, shape, strides)
        hit = self.cache.get(key)
        if hit is not None:
            return hit[0]
        return self._miss(ptr, shape, strides)

    def _miss(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> int:
        spec = self.spec
        if len(shape) != len(spec.box):
            raise LaunchError(f"{self.where}: a {len(spec.box)}-D tensor map cannot describe a tensor of "
                              f"shape {list(shape)}")
        buf = (ctypes.c_uint8 * (MAP_BYTES + MAP_ALIGN))()
        addr = -(-ctypes.addressof(buf) // MAP_ALIGN) * MAP_ALIGN
        if all(shape) and not self._copied(shape):  # else the kernel never reads the map: zeros
            ctypes.memmove(addr, self._encoded(ptr, shape, strides), MAP_BYTES)
        if len(self.cache) >= self.capacity:
            del self.cache[next(iter(self.cache))]
        self.cache[(ptr, shape) if strides is None else (ptr, shape, strides)] = (addr, buf)
        return addr

    def _copied(self, shape: tuple[int, ...]) -> bool:
        """Whether the kernel copies this tensor without TMA (its fallback for unaligned rows)."""
        return self.spec.fallback and (shape[-1] * ELEMENT_BYTES[self.spec.dtype]) % 16 != 0

    def _encoded(self, ptr: int, shape: tuple[int, ...], elements: tuple[int, ...] | None = None) -> bytes:
        esize = ELEMENT_BYTES[self.spec.dtype]
        if ptr % 16:
            raise LaunchError(f"{self.where}: TMA needs a 16-byte-aligned base address, got {ptr:#x} "
                              "(a view with an offset?); pass an aligned tensor or .clone() it")
        dims = tuple(reversed(shape))
        if elements is not None:  # a strided view: its own strides, innermost first
            why = tma_refusal(self.where, shape, elements, esize)
            if why is not None:
                raise LaunchError(why)
            strides = [st * esize for st in reversed(elements[:-1])]
        else:
            strides, stride = [], esize
            for d in dims[:-1]:
                stride *= d
                strides.append(stride)
        if strides and strides[0] % 16:
            raise RowsNotAligned(rows_not_aligned(self.where, shape, self.spec.dtype))
        if any(d >= 2**32 for d in dims) or any(s >= 2**40 for s in strides):
            raise LaunchError(f"{self.where}: shape {list(shape)} is too large for a TMA tensor map")
        raw = self.encode(self.spec, ptr, dims, tuple(strides))
        if len(raw) != MAP_BYTES:
            raise TkError(f"internal error: a tensor map of {len(raw)} bytes for '{self.spec.name}'")
        return raw


def rows_not_aligned(where: str, shape, dtype: str) -> str:
    """Why TMA cannot address a tensor of this shape: its rows are not a multiple of 16 bytes."""
    esize = ELEMENT_BYTES[dtype]
    return (f"{where}: TMA needs rows of a multiple of 16 bytes, but a row of shape {list(shape)} is "
            f"{shape[-1]} x {dtype} = {shape[-1] * esize} bytes; make the last dimension a multiple of {16 // esize}")


def row_multiples(encoders: list["TensorMapEncoder"], params) -> dict[str, tuple[int, int]]:
    """The named dims that are some TMA-only tensor's row length: ``{dim: (multiple, argument)}``.
    A launch must bind each to a multiple of its value (rows of whole 16-byte units); the argument
    is the first tensor that has it as its last dimension (for the error message)."""
    out: dict[str, tuple[int, int]] = {}
    for enc in encoders:
        last = params[enc.spec.param].dims[-1] if params[enc.spec.param].dims else None
        if enc.spec.fallback or not isinstance(last, str):
            continue
        multiple = 16 // ELEMENT_BYTES[enc.spec.dtype]
        held = out.get(last)
        if held is None or multiple > held[0]:
            out[last] = (multiple, enc.spec.param)
    return out


def tensor_map_encoders(signature: list[dict], num_params: int, kernel: str,
                        encode: Encode | None = None) -> list[TensorMapEncoder]:
    """The encoders of a kernel's tensor-map parameters, in parameter order."""
    out = []
    for entry in signature:
        if entry.get("kind") == "tensormap":
            spec = parse_entry(entry, num_params)
            where = f"{kernel}: argument {spec.param} ('{spec.tensor}')"
            out.append(TensorMapEncoder(spec, where, encode))
    return out


def fast_path_lines(encoders: list[TensorMapEncoder], tensor_dims: dict[int, tuple], first_slot: int,
                    views: dict[int, str] | None = None) -> tuple[list[str], list[str], dict]:
    """What a launcher's generated fast path adds for the tensor maps: lines that look the maps
    up (before a parameter block is taken: a refusal raises there and leaks nothing), lines that
    point the block's ``ptrs`` entries from ``first_slot`` on at them, and the names they use.
    ``tensor_dims[i]`` is argument i's shape as source (``d_M`` or a literal); ``views[i]`` names
    the strides of an argument taken as a view (its maps are then encoded with them)."""
    lookups, stores, scope = [], [], {}
    for j, enc in enumerate(encoders):
        dims = tensor_dims[enc.spec.param]
        view = (views or {}).get(enc.spec.param)
        if view is not None:
            lookups.append(f"tm{j} = tmapS{j}(p{enc.spec.param}, ({''.join(f'{d}, ' for d in dims)}), {view})")
            scope[f"tmapS{j}"] = enc.strided
        else:
            lookups.append(f"tm{j} = tmap{j}(p{enc.spec.param}{''.join(f', {d}' for d in dims)})")
            scope[f"tmap{j}"] = enc
        stores.append(f"ptrs[{first_slot + j}] = tm{j}")
    return lookups, stores, scope
