"""Proving a `.pt2` archive (`torch.export.save`) safe to hand to `torch.export.load`, before it is.

`torch.export.load` trusts its file. From the torch source (torch/export/pt2_archive/_package.py,
torch/_export/serde/serialize.py, torch/export/_unlift.py, torch/fx/graph.py) it would:
- unpickle: weights and constants whose payload config says `use_pickle` (`torch.load(...,
  weights_only=False)`), custom objects (`torch._C._pickle_load_obj`), opaque objects
  (`pickle.loads`), legacy weight and constant files (`data/weights/model.pt`), and example inputs
  that the restricted unpickler refuses (it falls back to `weights_only=False`); a zip that is not a
  pt2 archive goes to the pre-2.7 reader, which unpickles too;
- load shared libraries (AOTInductor packages, `data/aotinductor/`);
- evaluate text as Python: every symbolic-shape expression (`expr_str`) goes through
  `sympy.sympify`, which is `eval` and computes what it can (`9**9**9**9` runs for ever and fills
  the memory); guard strings (`guards_code`) are `exec`'d by `.module()`
  (the loader calls `.module(check_guards=False)`, which never reads them);
- resolve any `torch.*` or `operator.*` name as a graph node's function (`torch.save`, ...) and
  write attribute names and argument names unescaped into the Python source FX compiles.

So every record is accounted for: only the plain layout torch.export.save writes for tensors,
raw-byte weights and constants only, and the program's JSON walked whole: operators from aten and
prims (bar file access) and the symbolic-shape ones, names that are identifiers, expressions in a
grammar of sympy constructors with no attribute, subscript or free name and a bounded size (small
whole-number exponents, integers within 64 bits, a value of at most MAX_VALUE_BITS bits whatever the
symbols are; `bound_expression`), JSON integers within 64 bits, tree specs of built-in
containers, no control characters. Anything else is refused with the file and the reason; what is
not recognised is refused, never guessed. The file layout is torch's own
(`torch.export.pt2_archive.constants`).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from typing import Any

from builder.core.untrusted import load_torch_bytes

from .model_files import ModelFile

MODEL = "model"  # torch.export.save's one program name; torch.export.load returns only this one
SAVE_HINT = "save the program with torch.export.save(torch.export.export(model.eval(), ...), 'model.pt2')"

# Python identifiers (what FX writes as names) and dotted attribute paths of parameters ("0.weight").
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ATTRIBUTE_PATH = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\Z")
PAYLOAD_FILE = re.compile(r"(weight|tensor)_[0-9]+\Z")

# Graph functions a classifier's program is made of: aten and prims operators (by their serialised
# name), less those that read or write files, and the symbolic-shape helpers torch's deserialiser
# itself accepts (its _SYM_OPS) with getitem for operators that return several values.
OPERATOR = re.compile(r"torch\.ops\.(aten|prims)\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+\Z")
FILE_OPERATORS = {"from_file", "save"}
SYMBOLIC_FUNCTIONS = {
    *(f"_operator.{name}" for name in ("getitem", "eq", "ne", "le", "ge", "lt", "gt", "neg", "pos", "mul", "add")),
    *(f"_operator.{name}" for name in ("sub", "floordiv", "mod", "pow", "truediv", "and_", "or_", "lshift", "rshift")),
    "math.trunc",
    *(f"torch.sym_{name}" for name in ("not", "int", "float", "ite", "max", "min", "sqrt")),
}

# Symbolic-shape expressions are sympy's `srepr` (Symbol('s77', positive=True, integer=True),
# Add(Mul(Integer(2), ...)), FloorDiv(...)): these constructors, symbol names, numbers, quoted
# plain words and operators are all the grammar allows, so `sympify` can only build an expression.
SYMPY_NAMES = {
    *("Symbol", "Dummy", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs"),
    *("floor", "ceiling", "sqrt", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality"),
    *("StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "And", "Or", "Not", "Xor"),
    *("true", "false", "True", "False", "BooleanTrue", "BooleanFalse", "oo", "zoo", "nan", "Infinity"),
    *("NegativeInfinity", "One", "Zero", "NegativeOne", "Half", "Piecewise", "ExprCondPair", "Tuple"),
    # torch.utils._sympy.functions, as the deserialiser names them
    *("FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv"),
    *("LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "TruncToFloat"),
    *("IsNonOverlappingAndDenseIndicator", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity"),
}
SYMBOL_NAME = re.compile(r"([a-z]+[0-9]+|(OpaqueUnaryFn|BitwiseFn)_[a-z0-9_]+)\Z")
RANGE_SYMBOL = re.compile(r"[a-z]+[0-9]{1,6}\Z")  # torch counts up to an unbacked symbol's number
EXPRESSION_TOKEN = re.compile(
    r"\s*(?:(?P<string>'[A-Za-z0-9_.+-]*')|(?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%<>(),=&|~^]))"
)
MAX_EXPRESSION = 10_000
# What a shape expression may compute: sizes are below 2**63, so an integer literal beyond it is no
# size; an exponent is a whole number up to MAX_EXPONENT (s0**2 is how sympy writes s0*s0); and the
# value, bounded with every symbol taken as 64 bits, stays under MAX_VALUE_BITS bits (a power tower
# of small numbers is refused before sympy computes it).
MAX_INTEGER = 2**63
MAX_EXPONENT = 64
MAX_VALUE_BITS = 4096
SYMBOL_BITS = 64
# sympify turns every number it reads (a literal, or a string handed to Integer, Rational or Float)
# into an exact or arbitrary-precision value: `Float('1e-999999999')` or a precision of 10**8 bits
# computes for ever. A number is at most MAX_NUMBER_DIGITS digits with a decimal exponent of at most
# MAX_DECIMAL_EXPONENT; a precision (Float's `precision`, `dps`) at most MAX_PRECISION bits.
MAX_NUMBER_DIGITS = 40
MAX_DECIMAL_EXPONENT = 64
MAX_PRECISION = 1024
NUMBER_TEXT = re.compile(r"[+-]?(?P<digits>[0-9]*\.?[0-9]*)(?:[eE](?P<exponent>[+-]?[0-9]+))?\Z")
PRECISION_KEYWORDS = {"precision", "dps", "prec"}
POWER_FUNCTIONS = {"Pow", "PowByNatural", "FloatPow"}  # (base, exponent)

# pytree node types a classifier's inputs and outputs are made of (a defaultdict or an enum would
# make torch import a module the file names).
TREE_TYPES = {
    None,
    "builtins.tuple",
    "builtins.list",
    "builtins.dict",
    "collections.OrderedDict",
    "torch.fx.immutable_collections.immutable_list",
    "torch.fx.immutable_collections.immutable_dict",
}


class Refused(Exception):
    """One reason an archive is refused (turned into a ModelFileError naming the file)."""


def check_archive(file: ModelFile) -> None:
    """Return once every record of `file` is proved free of pickles, code and native libraries;
    else a ModelFileError naming the file and the reason."""
    try:
        _check(file)
    except Refused as refusal:
        raise file.error(f"refused: {refusal}") from None


def _check(file: ModelFile) -> None:
    from torch.export.pt2_archive import PT2ArchiveReader

    try:
        with zipfile.ZipFile(io.BytesIO(file.data)) as archive:
            zip_names = archive.namelist()
            compressed = any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise Refused(f"not a .pt2 archive (not a readable zip file: {exc}); {SAVE_HINT}") from None
    root = zip_names[0].split("/", 1)[0] if zip_names else ""
    # Every member under the one root folder torch's reader reads: nothing the pre-2.7 fallback
    # reader (top-level `version`, pickled state dicts) could pick up.
    if not root or "/" not in zip_names[0] or any(not name.startswith(f"{root}/") for name in zip_names):
        raise Refused("its members are not all under one archive folder, as torch.export.save writes them")
    try:
        reader = PT2ArchiveReader(io.BytesIO(file.data))
        names = reader.get_file_names()
    except (AssertionError, RuntimeError, UnicodeDecodeError):
        raise Refused(f"a zip file but not a torch.export archive (no archive_format 'pt2'); {SAVE_HINT}") from None
    _check_layout(zip_names, names, reader, len(file.data) if not compressed else -1)
    for kind in ("weights", "constants"):
        _check_payloads(reader, kind, names)
    _check_program(reader)
    _check_example_inputs(reader)


def _check_layout(zip_names: list[str], names: list[str], reader, file_size: int) -> None:
    from torch.export.pt2_archive import constants as layout

    if len(zip_names) != len(names):  # the two zip readers disagree on what the archive holds
        raise Refused("its members are not all under one archive folder, as torch.export.save writes them")
    if len(set(names)) != len(names):
        raise Refused("a member name appears twice")
    if sum(reader.archive_file.get_record_size(n) for n in names) > file_size:
        raise Refused("it holds compressed members, which torch.export.save never writes")
    weights_config = layout.WEIGHTS_CONFIG_FILENAME_FORMAT.format(MODEL)
    constants_config = layout.CONSTANTS_CONFIG_FILENAME_FORMAT.format(MODEL)
    allowed = {
        layout.ARCHIVE_FORMAT_PATH,
        layout.ARCHIVE_VERSION_PATH,
        ".data/version",
        ".data/serialization_id",
        "byteorder",
        layout.MODELS_FILENAME_FORMAT.format(MODEL),
        layout.SAMPLE_INPUTS_FILENAME_FORMAT.format(MODEL),
        weights_config,
        constants_config,
    }
    for name in names:
        _check_member(name, allowed, layout)
    for required in (layout.MODELS_FILENAME_FORMAT.format(MODEL), weights_config, constants_config):
        if required not in names:
            raise Refused(f"it lacks {required}; {SAVE_HINT}")
    if layout.SAMPLE_INPUTS_FILENAME_FORMAT.format(MODEL) not in names:
        raise Refused(f"it lacks {layout.SAMPLE_INPUTS_FILENAME_FORMAT.format(MODEL)}; {SAVE_HINT}")


def _check_member(name: str, allowed: set[str], layout) -> None:
    if name in allowed or name.startswith(layout.EXTRA_DIR):  # extra files are read as text only
        return
    legacy = (f"{layout.WEIGHTS_DIR}{MODEL}.pt", f"{layout.CONSTANTS_DIR}{MODEL}.pt")
    if name in legacy:
        raise Refused(f"{name} is a legacy-format (pickled) weights or constants file; {SAVE_HINT} with torch 2.7+")
    if name.startswith(layout.AOTINDUCTOR_DIR):
        raise Refused(f"{name}: AOTInductor-compiled code (native libraries) is never loaded from a file")
    for prefix, kind in ((layout.CUSTOM_OBJ_FILENAME_PREFIX, "custom"), (layout.OPAQUE_OBJ_FILENAME_PREFIX, "opaque")):
        if name.startswith(f"{layout.CONSTANTS_DIR}{prefix}"):
            raise Refused(f"{name} is a pickled {kind}-object constant; only tensor constants are loaded")
    if name.startswith(layout.MODELS_DIR):
        raise Refused(f"{name}: it holds more than the one program '{MODEL}' torch.export.save writes")
    directory = layout.WEIGHTS_DIR if name.startswith(layout.WEIGHTS_DIR) else layout.CONSTANTS_DIR
    if name.startswith(directory) and PAYLOAD_FILE.match(name[len(directory) :]):
        return
    raise Refused(f"it holds {name}, which is not part of a plain torch.export program")


def _json(reader, name: str) -> Any:
    try:
        return json.loads(reader.read_bytes(name).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Refused(f"{name} is not valid JSON ({type(exc).__name__})") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _check_payloads(reader, kind: str, names: list[str]) -> None:
    """Weights or constants: raw tensor bytes only (`use_pickle` false), each record present and,
    when empty, for a tensor with no elements (torch would allocate the declared size)."""
    from torch.export.pt2_archive import constants as layout

    if kind == "weights":
        config_name, directory, prefix = (
            layout.WEIGHTS_CONFIG_FILENAME_FORMAT.format(MODEL),
            layout.WEIGHTS_DIR,
            "weight_",
        )
    else:
        config_name, directory = layout.CONSTANTS_CONFIG_FILENAME_FORMAT.format(MODEL), layout.CONSTANTS_DIR
        prefix = layout.TENSOR_CONSTANT_FILENAME_PREFIX
    config = _json(reader, config_name)
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise Refused(f"{config_name} is not a payload config (no 'config' object)")
    for fqn, meta in entries.items():
        if not ATTRIBUTE_PATH.match(fqn):
            raise Refused(f"{config_name}: {kind[:-1]} name {fqn[:60]!r} is not a dotted attribute path")
        if not isinstance(meta, dict):
            raise Refused(f"{config_name}: {fqn} is not an object")
        path_name = meta.get("path_name")
        if meta.get("use_pickle") is not False:
            raise Refused(f"{kind[:-1]} {fqn} is stored as a pickle (use_pickle in {config_name}); {SAVE_HINT}")
        if not isinstance(path_name, str) or not path_name.startswith(prefix) or not PAYLOAD_FILE.match(path_name):
            raise Refused(f"{config_name}: {fqn} names {str(path_name)[:60]!r}, not a raw {kind[:-1]} record")
        record = f"{directory}{path_name}"
        if record not in names:
            raise Refused(f"{config_name}: {fqn} names {record}, which the archive lacks")
        sizes = (meta.get("tensor_meta") or {}).get("sizes") if isinstance(meta.get("tensor_meta"), dict) else None
        if not isinstance(sizes, list) or not all(_plain_int(s) for s in sizes):
            raise Refused(f"{config_name}: {fqn} has no concrete tensor sizes")
        elements = 1
        for size in sizes:
            elements *= size["as_int"]
        if elements and reader.archive_file.get_record_size(record) == 0:
            raise Refused(f"{config_name}: {fqn} declares {elements} elements but its record is empty")


def _plain_int(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("as_int"), int) and value["as_int"] >= 0


def _check_program(reader) -> None:
    from torch.export.pt2_archive import constants as layout

    name = layout.MODELS_FILENAME_FORMAT.format(MODEL)
    program = _json(reader, name)
    if not isinstance(program, dict):
        raise Refused(f"{name} is not an exported program (not a JSON object)")
    ranges = program.get("range_constraints") or {}
    if not isinstance(ranges, dict) or not all(RANGE_SYMBOL.match(str(k)) for k in ranges):
        raise Refused(f"{name}: its range constraints are not keyed by symbol names such as s0")
    try:
        _walk(program, "")
    except RecursionError:
        raise Refused(f"{name} nests too deeply to be an exported program") from None
    except Refused as refusal:
        raise Refused(f"{name}: {refusal}") from None


def _walk(value: object, key: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        raise Refused(f"{key or 'a value'} holds an integer of {len(str(abs(value)))} digits, beyond 64 bits")
    if isinstance(value, dict):
        for child_key, child in value.items():
            _check_text(child_key, "")
            _walk(child, child_key)
    elif isinstance(value, list):
        for item in value:
            _walk(item, key)
    elif isinstance(value, str):
        _check_text(value, key)


def _check_text(text: str, key: str) -> None:
    # A carriage return (or any control character) in a name or comment FX writes into source
    # starts a new line of code.
    if any(c < " " and c not in "\n\t" for c in text) or "\x7f" in text:
        raise Refused(f"a string ({key or 'a key'}) holds a control character")
    if key in ("target", "as_operator"):
        _check_operator(text)
    elif key == "expr_str":
        check_expression(text)
    elif key in ("name", "as_name", "forward_arg_names"):
        if not IDENTIFIER.match(text):
            raise Refused(f"{key} {text[:60]!r} is not a Python identifier")
    elif key.endswith("_name") and not ATTRIBUTE_PATH.match(text):
        raise Refused(f"{key} {text[:60]!r} is not a dotted attribute path")
    elif key in ("in_spec", "out_spec"):
        _check_tree_spec(text, key)


def _check_operator(target: str) -> None:
    match = OPERATOR.match(target)
    if match and target.split(".")[3] not in FILE_OPERATORS:
        return
    if target in SYMBOLIC_FUNCTIONS:
        return
    raise Refused(
        f"graph function {target[:80]!r} is not one loaded from a file (aten and prims operators and "
        "symbolic-shape arithmetic only; higher-order and custom operators are refused)"
    )


def check_expression(text: str) -> None:
    """Refuse a symbolic-shape expression outside the srepr grammar (sympify `eval`s it)."""
    if len(text) > MAX_EXPRESSION:
        raise Refused(f"a symbolic-shape expression of {len(text)} characters")
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            return
        token = EXPRESSION_TOKEN.match(text, position)
        if token is None:
            raise Refused(f"symbolic-shape expression {text[:60]!r} holds {text[position : position + 10]!r}")
        # a whole-number literal is bounded by its value below; a decimal one, or a string, by its text
        literal, string = token.group("number"), (token.group("string") or "''")[1:-1]
        if literal and not literal.isdigit():
            _check_number_text(literal, text)
        if string and not IDENTIFIER.match(string):
            _check_number_text(string, text)
        name = token.group("name")
        if name is not None:
            rest = text[token.end() :].lstrip()
            is_keyword = rest.startswith("=") and not rest.startswith("==")
            if is_keyword and name.startswith("_") or not is_keyword and not _expression_name(name):
                raise Refused(f"symbolic-shape expression {text[:60]!r} names {name[:40]!r}")
        position = token.end()
    bound_expression(text)


def _check_number_text(number: str, text: str) -> None:
    """A number as sympify would read it (a literal, or a string given to a number constructor):
    plain decimal digits, at most MAX_NUMBER_DIGITS of them, a decimal exponent within
    MAX_DECIMAL_EXPONENT. Anything else in a string (underscores, a second sign) is refused too."""
    matched = NUMBER_TEXT.match(number)
    if matched is None or not any(c.isdigit() for c in matched["digits"]):
        raise Refused(f"symbolic-shape expression {text[:60]!r} holds {number[:40]!r}, which is not a plain number")
    exponent = int(matched["exponent"] or 0) if len(matched["exponent"] or "") <= 8 else MAX_DECIMAL_EXPONENT + 1
    if len(matched["digits"]) > MAX_NUMBER_DIGITS or abs(exponent) > MAX_DECIMAL_EXPONENT:
        raise Refused(
            f"symbolic-shape expression {text[:60]!r} holds the number {number[:40]!r} (at most {MAX_NUMBER_DIGITS} "
            f"digits and a decimal exponent within {MAX_DECIMAL_EXPONENT}): sympy would compute it for ever"
        )


def bound_expression(text: str) -> None:
    """Refuse an expression (already in the grammar) whose value sympy could not compute quickly: an
    integer beyond 64 bits, an exponent that is not a whole number up to MAX_EXPONENT, a precision
    beyond MAX_PRECISION bits, or a value that could exceed MAX_VALUE_BITS bits. The text is read as
    sympify reads it (`^` is a power there: its parser's convert_xor), with `ast`, which evaluates
    nothing."""
    import ast

    try:
        tree = ast.parse(text.strip().replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # too deep, or not Python at all
        raise Refused(
            f"symbolic-shape expression {text[:60]!r} is not a plain expression (or nests too deeply)"
        ) from None
    try:
        bits = _value_bits(tree.body, text)
    except RecursionError:
        raise Refused(f"symbolic-shape expression {text[:60]!r} nests too deeply") from None
    if bits > MAX_VALUE_BITS:
        raise Refused(
            f"symbolic-shape expression {text[:60]!r} could reach a {bits}-bit value (at most {MAX_VALUE_BITS}): "
            "no shape is that large"
        )


def _value_bits(node, text: str) -> int:
    """An upper bound on the bits of `node`'s value, every symbol taken as SYMBOL_BITS bits."""
    import ast

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            return 1
        if abs(node.value) > MAX_INTEGER:
            raise Refused(f"symbolic-shape expression {text[:60]!r} holds a number beyond 64 bits")
        return max(1, int(abs(node.value)).bit_length())
    if isinstance(node, ast.UnaryOp):
        return _value_bits(node.operand, text)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _power_bits(node.left, node.right, text)
    if isinstance(node, ast.BinOp):
        left, right = _value_bits(node.left, text), _value_bits(node.right, text)
        return left + right if isinstance(node.op, (ast.Mult, ast.LShift)) else max(left, right) + 1
    if isinstance(node, (ast.Compare, ast.BoolOp)):
        for child in ast.iter_child_nodes(node):
            _value_bits(child, text)
        return 1
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        for keyword in node.keywords:
            if keyword.arg in PRECISION_KEYWORDS:
                _bounded_precision(keyword.value, text)
        if name == "Float" and len(node.args) > 1:  # Float(value, precision) by position
            _bounded_precision(node.args[1], text)
        arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
        if name in POWER_FUNCTIONS and len(node.args) == 2:
            return _power_bits(node.args[0], node.args[1], text)
        if name in ("Symbol", "Dummy"):
            return SYMBOL_BITS
        bits = [_value_bits(argument, text) for argument in arguments] or [1]
        return sum(bits) if name in ("Mul", "LShift") else max(bits) + len(bits)
    if isinstance(node, ast.Name):  # a symbol (s0), or a constant such as oo or true
        return SYMBOL_BITS
    if isinstance(node, (ast.Tuple, ast.List)):
        return max((_value_bits(element, text) for element in node.elts), default=1)
    raise Refused(f"symbolic-shape expression {text[:60]!r} holds a {type(node).__name__}")


def _bounded_precision(node, text: str) -> None:
    import ast

    if not (isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= MAX_PRECISION):
        raise Refused(f"symbolic-shape expression {text[:60]!r} asks for a precision beyond {MAX_PRECISION} bits")


def _power_bits(base, exponent, text: str) -> int:
    """Bits of base ** exponent, for an exponent that is a whole number up to MAX_EXPONENT."""
    import ast

    value = exponent
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Integer":
        value = value.args[0] if len(value.args) == 1 else None
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    if not (isinstance(value, ast.Constant) and type(value.value) is int and value.value <= MAX_EXPONENT):
        raise Refused(
            f"symbolic-shape expression {text[:60]!r} raises to a power that is not a whole number up to {MAX_EXPONENT}"
        )
    return _value_bits(base, text) * max(1, value.value)


def _expression_name(name: str) -> bool:
    return name in SYMPY_NAMES or bool(SYMBOL_NAME.match(name))


def _check_tree_spec(text: str, key: str) -> None:
    try:
        protocol, spec = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        raise Refused(f"{key} is not a pytree spec") from None
    if protocol != 1:
        raise Refused(f"{key} uses pytree protocol {protocol!r}, not 1")
    _check_tree_node(spec, key)


def _check_tree_node(node: object, key: str) -> None:
    if not isinstance(node, dict) or not isinstance(node.get("children_spec", []), list):
        raise Refused(f"{key} is not a pytree spec")
    if node.get("type") not in TREE_TYPES:
        raise Refused(f"{key} holds a {str(node.get('type'))[:60]!r}, not a built-in container")
    context = node.get("context")
    if context is not None:
        if not isinstance(context, str) or "__enum__" in context:  # an enum makes torch import its module
            raise Refused(f"{key} holds a context that is not plain JSON keys")
    for child in node.get("children_spec", []):
        _check_tree_node(child, key)


def _check_example_inputs(reader) -> None:
    """The example inputs are a torch.save file torch reads with the restricted unpickler and, when
    that refuses, with the full one: prove here that the restricted one reads them."""
    import pickle

    from torch.export.pt2_archive import constants as layout

    name = layout.SAMPLE_INPUTS_FILENAME_FORMAT.format(MODEL)
    data = reader.read_bytes(name)
    if not data:
        return
    try:
        inputs = load_torch_bytes(data)  # the restricted unpickler only
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError, TypeError, AttributeError) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise Refused(f"{name} needs more than tensors and plain values to unpickle ({reason})") from None
    if not isinstance(inputs, (tuple, dict)):
        raise Refused(f"{name} holds a {type(inputs).__name__}, not example inputs")
