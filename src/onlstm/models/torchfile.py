"""Reading ``torch.save`` files of other people's code as data (:func:`read_torch_file`): a restricted unpickler
that builds tensors, plain containers and inert :class:`Record` stand-ins for the classes a file names, and
refuses every other global before anything is looked up or called (docs/sharing.md, "Importing a checkpoint of
the authors' code"). Both of torch's formats: the zip archive (``data.pkl`` plus one file per storage, the
default since torch 1.6) and the legacy stream (pickles followed by the raw storages, torch 0.4 to 1.5).

A file is hostile until read: what it may make this process hold is bounded by its size (:func:`memory_budget`),
checked before anything is decompressed or allocated; the pickles are read by Python's own unpickler with the
opcodes that could run a class's ``__setstate__``, hash a key nested without end or spell out a value guarded
(:class:`onlstm.pickles.PlainUnpickler`)."""

from __future__ import annotations

import _compat_pickle
import builtins
import collections
import io
import math
import pickle
import struct
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import CheckpointError
from ..errors import first_line, quote
from ..files import read_regular
from ..pickles import PlainUnpickler, RefusedPickle, check_key

#: Modules of the authors' repository (yikangshen/Ordered-Neurons) and of torch whose classes become records;
#: their names are never imported.
RECORD_MODULES = frozenset(
    {"model", "ON_LSTM", "splitcross", "data", "locked_dropout", "weight_drop", "embed_regularize", "utils"}
)
# torch.nn.backends: torch < 1.2 kept a backend object on every module (``_backend``), pickled as a call of
# torch.nn.backends.thnn._get_thnn_function_backend; as a record, that call builds nothing.
RECORD_PREFIXES = ("torch.nn.modules.", "torch.optim.", "torch.nn.backends.")

#: torch's storage classes, as a file names them, and the dtype of their elements.
STORAGE_DTYPES = {
    "DoubleStorage": torch.float64,
    "FloatStorage": torch.float32,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "UntypedStorage": torch.uint8,
}
_DTYPE_NAMES = {
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "double", "float", "half", "long", "int", "short",
}  # fmt: skip
#: Builtins that build plain values and hash nothing (a pickle of protocol 2 names set and frozenset, for
#: instance; those, and str, are given below with their checks).
_PLAIN_BUILTINS = ("list", "tuple", "int", "float", "bool", "complex", "slice")
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

#: What reading a file may make this process hold (entries decompressed, storages, the model built from them), per
#: byte of the file: torch.save stores tensors uncompressed, so a real file's storages fit in its own size; the
#: factor leaves room for half-precision weights read as float32. The floor lets a tiny file read.
BYTES_PER_FILE_BYTE = 4
BUDGET_FLOOR = 1 << 20
#: Whatever the size: no read holds more, and no larger file is read (the authors' models are a few hundred MB).
HARD_CAP = 8 << 30
#: The largest tensor dimension, stride or element count a file may state (torch's are int64; a larger one is a
#: tampered file, and its digits are never spelled out).
MAX_EXTENT = 2**62


def memory_budget(file_size: int) -> int:
    """The most bytes that reading (and building from) a file of ``file_size`` bytes may hold."""
    return min(BYTES_PER_FILE_BYTE * file_size + BUDGET_FLOOR, HARD_CAP)


class TorchFileError(CheckpointError):
    """A ``torch.save`` file that cannot be read as data: a refused global, a truncated or foreign file."""


class Record:
    """An inert stand-in for an object of a class named in a file: the constructor's arguments (``args``) and
    the pickled state (``state``, usually the instance's ``__dict__``); items a pickle appends or sets go to
    ``items``. It has no behaviour of the class it stands for."""

    global_name = "?"
    args: tuple
    state: dict
    items: list

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.state, obj.items = args, {}, []
        return obj

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, slots) as pickle's default for slots
            state = {**(state[0] or {}), **(state[1] or {})}
        self.state = dict(state) if isinstance(state, dict) else {"_state": state}

    def append(self, value) -> None:
        self.items.append(value)

    def extend(self, values) -> None:
        self.items.extend(values)

    def __setitem__(self, key, value) -> None:
        self.items.append((key, value))

    @property
    def class_name(self) -> str:
        return self.global_name.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        return f"<record of {self.global_name}>"


_record_classes: dict[str, type[Record]] = {}


def record_class(module: str, name: str) -> type[Record]:
    """The :class:`Record` subclass standing for ``module.name`` (one per name, so that ``isinstance`` and the
    pickle memo work as with the real class)."""
    key = f"{module}.{name}"
    if key not in _record_classes:
        _record_classes[key] = type(name, (Record,), {"global_name": key, "__module__": __name__})
    return _record_classes[key]


class _Storage:
    """A storage of the file: a flat tensor of ``numel`` elements (filled after the pickle in the legacy format)."""

    __slots__ = ("dtype", "flat", "numel")

    def __init__(self, dtype: torch.dtype, numel: int, flat: torch.Tensor | None = None):
        self.dtype, self.numel = dtype, numel
        self.flat = torch.zeros(numel, dtype=dtype) if flat is None else flat


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


class _Budget:
    """The bytes a read may still take (:func:`memory_budget`), taken before each allocation."""

    def __init__(self, limit: int, source: str, what: str = "a file of this size may take"):
        self.limit, self.left, self.source, self.what = limit, limit, source, what

    def check(self, nbytes: int, what: str) -> None:
        if nbytes > self.left:  # nbytes itself is not written out: a hostile one may have thousands of digits
            raise TorchFileError(
                f"{self.source}: {what} would take more than the {self.limit:,} bytes {self.what}; the file is "
                "corrupt or hostile"
            )

    def take(self, nbytes: int, what: str) -> None:
        self.check(nbytes, what)
        self.left -= nbytes


class _TensorType:
    """What ``torch.Tensor`` stands for (the type argument of ``_rebuild_from_type_v2``)."""


def _extent(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_EXTENT


def _int_tuple(value, what: str) -> tuple[int, ...]:
    if _extent(value):
        return (value,)
    if not isinstance(value, (tuple, list)) or len(value) > 64 or not all(map(_extent, value)):
        raise TorchFileError(f"a tensor's {what} is {quote(value)}, not a short tuple of non-negative integers")
    return tuple(value)


def _rebuild_tensor(storage, offset, size, stride, *_ignored) -> torch.Tensor:
    """A view of ``storage``; the extent is checked first (a hostile file cannot read past a storage), and the view
    may not hold more elements than the storage (a broadcast view would multiply it when copied)."""
    if not isinstance(storage, _Storage) or not _extent(offset):
        raise TorchFileError("a tensor refers to something that is not a storage of the file")
    size, stride = _int_tuple(size, "size"), _int_tuple(stride, "stride")
    if len(size) != len(stride):
        raise TorchFileError(f"a tensor has size {size} but stride {stride}")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else offset - 1
    if last >= storage.numel:
        raise TorchFileError(f"a tensor of size {size} reaches past its storage of {storage.numel} elements")
    if math.prod(size) > storage.numel:
        raise TorchFileError(
            f"a tensor of size {size} repeats the {storage.numel} elements of its storage (a broadcast view); "
            "re-save it with .contiguous()"
        )
    return storage.flat.as_strided(size, stride, offset)


def _rebuild_parameter(data, requires_grad=False, *_ignored) -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise TorchFileError("a parameter's data is not a tensor")
    return data


def _parameter(data=None, requires_grad=True) -> torch.Tensor:
    # torch.nn.Parameter: torch 0.4 pickled a parameter as Parameter(data, requires_grad); its data is what we keep
    return _rebuild_parameter(data)


def _rebuild_from_type(func, kind, args, state=None) -> torch.Tensor:
    known = (_rebuild_tensor, _rebuild_parameter)
    if func not in known or kind not in (_TensorType, _parameter) or not isinstance(args, tuple):
        raise TorchFileError("a tensor of an unknown type or rebuilt by an unknown function")
    return func(*args)


def _defaultdict(factory=None, *_ignored) -> dict:
    return {}  # the factory only matters for keys not yet present; we only read


def _latin1(text, encoding="latin1") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise TorchFileError("_codecs.encode is allowed only to rebuild bytes (latin1)")
    return text.encode("latin1")


def _keyed(kind: type, pairs: bool) -> Callable:
    """``kind`` (a dict or set type) as the file may call it: its keys checked (:func:`onlstm.pickles.check_key`) first."""

    def build(items: Any = (), *rest):
        if rest or not isinstance(items, (dict, list, tuple, set, frozenset)):
            raise TorchFileError(f"{kind.__name__} is built here only from a container")
        keys: Iterable = items
        if pairs and not isinstance(items, dict):
            keys = [p[0] for p in items if isinstance(p, (tuple, list)) and p]
        for key in keys if not isinstance(items, (set, frozenset)) else ():  # a set's were hashed already
            check_key(key)
        return kind(items)

    return build


def _str(value: Any = "", *rest) -> str:
    # str() of an object from the file would spell out all of it (shared lists: exponentially many characters);
    # a pickle needs it to copy a string, decode bytes or write a number (whose digits Python limits)
    if isinstance(value, str) and not rest:
        return str(value)
    if isinstance(value, (bytes, bytearray)) and rest and all(isinstance(r, str) for r in rest):
        return str(value, *rest)
    if isinstance(value, (int, float)) and not rest:
        return str(value)
    raise TorchFileError("builtins.str may only copy a string, decode bytes or write a number here")


def _reconstructor(cls, base, state=None):
    # protocol 0/1's way to build an object: only records may be built this way
    if not (isinstance(cls, type) and issubclass(cls, Record)):
        raise TorchFileError("copyreg._reconstructor may build only records of the file's classes")
    return cls()


#: Every global a file may name, besides the record classes and storage types: what each one becomes.
ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "Tensor"): _TensorType,
    ("torch._tensor", "Tensor"): _TensorType,
    ("torch.nn.parameter", "Parameter"): _parameter,
    ("torch", "Size"): tuple,
    ("collections", "OrderedDict"): _keyed(collections.OrderedDict, pairs=True),
    ("collections", "defaultdict"): _defaultdict,
    ("collections", "Counter"): _keyed(collections.Counter, pairs=False),
    ("_codecs", "encode"): _latin1,
    ("copyreg", "_reconstructor"): _reconstructor,
    **{("builtins", n): getattr(builtins, n) for n in _PLAIN_BUILTINS},
    ("builtins", "set"): _keyed(set, pairs=False),
    ("builtins", "frozenset"): _keyed(frozenset, pairs=False),
    ("builtins", "dict"): _keyed(dict, pairs=True),
    ("builtins", "str"): _str,
    ("torch", "device"): _str,
}


class RestrictedTorchUnpickler(PlainUnpickler):
    """Builds only what :data:`ALLOWED`, the storage types and the record classes give, and sets the state of
    records alone; ``storage(dtype, key, numel)`` turns a persistent id into a :class:`_Storage`."""

    def __init__(self, file, storage: Callable[[torch.dtype, str, int], _Storage], source: str):
        super().__init__(file)
        self.storage, self.source = storage, source

    def may_build(self, obj: Any) -> bool:
        # a record; or a state_dict's OrderedDict, whose state is its ``_metadata`` dict alone (read, so that the
        # importer can say it is a state_dict instead of refusing the file as hostile)
        state = self.stack[-1]
        metadata = type(obj) is collections.OrderedDict and isinstance(state, dict) and set(state) <= {"_metadata"}
        return isinstance(obj, Record) or metadata

    def find_class(self, module: str, name: str):
        # a pickle of protocol 2 names Python 2's modules (__builtin__.set); pickle's own find_class renames them
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in ALLOWED:
            return ALLOWED[(module, name)]
        # torch.cuda.FloatStorage and the like: the legacy format's type of a storage saved on a GPU (the
        # authors' main.py trains and saves on CUDA); its bytes are the same, read onto the CPU
        if module in ("torch", "torch.storage", "torch.cuda") and name in STORAGE_DTYPES:
            return STORAGE_DTYPES[name]
        if module == "torch" and name in _DTYPE_NAMES:
            return getattr(torch, name)
        if (module in RECORD_MODULES or module.startswith(RECORD_PREFIXES)) and name.isidentifier():
            return record_class(module, name)
        raise TorchFileError(
            f"{self.source}: refused: it asks for {f'{module}.{name}'[:200]}, which a checkpoint of the authors' "
            "code never holds; nothing in it was run"
        )

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid:
            raise TorchFileError(f"{self.source}: a reference to external data of an unknown form")
        kind = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
        if kind == "module" and len(pid) >= 2:  # the legacy format names each module class with its source
            return pid[1]
        if kind != "storage" or len(pid) < 5:
            raise TorchFileError(f"{self.source}: a reference to external data of an unknown kind ({quote(kind)})")
        dtype, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(dtype, torch.dtype) or not _extent(numel):
            raise TorchFileError(f"{self.source}: a storage of an unknown type or size")
        if not (_extent(key) or (isinstance(key, str) and len(key) <= 200)):
            raise TorchFileError(f"{self.source}: a storage named by something other than a short string")
        if len(pid) > 5 and pid[5] is not None:
            raise TorchFileError(f"{self.source}: storage views (torch < 0.4) are not supported; re-save it")
        return self.storage(dtype, str(key), numel)


def read_torch_file(path: str | Path, wanted: str = "the .pt file the model was saved to") -> Any:
    """The object a ``torch.save`` file holds, with tensors as tensors and every class as a :class:`Record`;
    :class:`TorchFileError` (one line naming the file, and asking for the ``wanted`` file when it is none) for a
    refused global, a truncated or foreign file, or one that would take more memory than its size allows
    (:func:`memory_budget`). Only a regular file is read."""
    path = Path(path)
    data = read_regular(path, HARD_CAP, TorchFileError)
    try:
        if zipfile.is_zipfile(io.BytesIO(data)):
            return _read_zip(data, str(path))
        if data.startswith(b"PK\x03\x04"):
            raise TorchFileError(f"{path} is a zip archive cut short (no central directory); the file is truncated")
        if not data:
            raise TorchFileError(f"{path} is empty; give {wanted}")
        if not data.startswith(b"\x80"):  # torch.save's two formats: a zip archive, or pickles (protocol 2 and up)
            raise TorchFileError(
                f"{path} is not a torch.save file (it starts with {data[:12]!r}, neither a zip archive nor a pickle); "
                f"give {wanted}"
            )
        return _read_legacy(data, str(path))
    except TorchFileError:
        raise
    except RefusedPickle as exc:
        raise TorchFileError(f"{path}: refused: {exc}; nothing in it was run") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            RuntimeError, struct.error, zipfile.BadZipFile, MemoryError, OverflowError) as exc:  # fmt: skip
        raise TorchFileError(
            f"{path} cannot be read as a torch.save file ({type(exc).__name__}: {first_line(exc)}); is it truncated?"
        ) from None


#: How torch.save writes its entries (stored), and what else this reader decompresses in bounded steps; bzip2 and
#: lzma expand a whole block at once (a few KB to gigabytes) whatever is asked for, so they are refused.
_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}


def _open_zip(data: bytes, source: str) -> tuple[zipfile.ZipFile, _Budget]:
    """The archive, its entries' declared sizes and methods checked before any is decompressed."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    budget = _Budget(memory_budget(len(data)), source)
    for info in archive.infolist():
        if info.compress_type not in _ZIP_METHODS:
            raise TorchFileError(
                f"{source}: entry {quote(info.filename)} is compressed with zip method {info.compress_type}, which "
                "torch.save never uses; it is not read"
            )
    budget.check(sum(info.file_size for info in archive.infolist()), "its entries (by their declared sizes)")
    return archive, budget


def _entry(archive: zipfile.ZipFile, name: str, budget: _Budget) -> bytearray:
    """An entry's bytes, decompressed a MiB at a time, never past its declared size (zipfile stops there)."""
    info = archive.getinfo(name)
    budget.take(info.file_size, f"entry {quote(name)}")
    out = bytearray()
    with archive.open(info) as f:
        while chunk := f.read(1 << 20):
            out += chunk
    return out


def _read_zip(data: bytes, source: str) -> Any:
    archive, budget = _open_zip(data, source)
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise TorchFileError(f"{source} is a zip archive without one data.pkl; is it a torch.save file?")
    prefix = pickles[0][: -len("data.pkl")]
    if archive.namelist().count(prefix + "byteorder") and _entry(archive, prefix + "byteorder", budget) != b"little":
        raise TorchFileError(f"{source} was written on a big-endian machine; re-save it on a little-endian one")
    storages: dict[str, _Storage] = {}

    def storage(dtype: torch.dtype, key: str, numel: int) -> _Storage:
        if key not in storages:
            name, itemsize = f"{prefix}data/{key}", _itemsize(dtype)
            size = archive.getinfo(name).file_size  # KeyError for a missing entry: reported as truncated
            if size != numel * itemsize:  # checked before reading: a storage cannot claim more than it holds
                raise TorchFileError(f"{source}: storage {key} holds {size} bytes, not {numel * itemsize}")
            raw = _entry(archive, name, budget)
            flat = torch.frombuffer(raw, dtype=dtype) if numel else torch.empty(0, dtype=dtype)
            storages[key] = _Storage(dtype, numel, flat)
        return storages[key]

    return RestrictedTorchUnpickler(io.BytesIO(_entry(archive, pickles[0], budget)), storage, source).load()


def _read_legacy(data: bytes, source: str) -> Any:
    stream = io.BytesIO(data)
    header = lambda: RestrictedTorchUnpickler(stream, _no_storage(source), source).load()
    if header() != LEGACY_MAGIC:
        raise TorchFileError(f"{source} is not a torch.save file (no zip archive, no legacy magic number)")
    if header() != LEGACY_PROTOCOL:
        raise TorchFileError(f"{source}: a legacy torch.save file of an unknown protocol version")
    info = header()
    if isinstance(info, dict) and info.get("little_endian") is False:
        raise TorchFileError(f"{source} was written on a big-endian machine; re-save it on a little-endian one")
    storages: dict[str, _Storage] = {}
    # the storages' bytes follow the pickle in the file: together they cannot claim more than the file holds
    budget = _Budget(len(data), source, "the file holds")

    def storage(dtype: torch.dtype, key: str, numel: int) -> _Storage:
        if key not in storages:
            budget.take(numel * _itemsize(dtype), f"storage {key}")
            storages[key] = _Storage(dtype, numel)
        return storages[key]

    result = RestrictedTorchUnpickler(stream, storage, source).load()
    keys = header()
    if not isinstance(keys, list) or not all(_extent(k) or isinstance(k, str) for k in keys):
        raise TorchFileError(f"{source}: the list of storages is not a list of names; the file is corrupt")
    if set(map(str, keys)) != set(storages):
        raise TorchFileError(f"{source}: the list of storages does not match the pickle; the file is corrupt")
    for key in map(str, keys):
        _fill_legacy_storage(stream, storages[key], source)
    return result


def _fill_legacy_storage(stream: io.BytesIO, storage: _Storage, source: str) -> None:
    """One raw storage of the legacy format: its element count (int64, little-endian), then its bytes."""
    head = stream.read(8)
    if len(head) != 8 or struct.unpack("<q", head)[0] != storage.numel:
        raise TorchFileError(f"{source}: a storage's data is missing or of the wrong size; the file is truncated")
    nbytes = storage.numel * storage.flat.element_size()
    raw = stream.read(nbytes)
    if len(raw) != nbytes:
        raise TorchFileError(f"{source}: a storage's data is cut short; the file is truncated")
    if nbytes:
        storage.flat.copy_(torch.frombuffer(bytearray(raw), dtype=storage.dtype))


def _no_storage(source: str) -> Callable[[torch.dtype, str, int], _Storage]:
    def refuse(dtype, key, numel):
        raise TorchFileError(f"{source}: a storage outside the main pickle; the file is corrupt")

    return refuse
