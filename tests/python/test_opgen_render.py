"""The Python half of opgen's renderer (generator/python/opgen_render), unit by
unit: every filter through which spec text reaches generated code keeps the
text inside its literal or comment whatever it holds, and the spellings of
the model's facts read back to the facts."""

import ast
import re
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "generator" / "python"))

from opgen_render import escaping, spelling  # noqa: E402

# What hostile docs hold: quotes, backslashes, comment ends, line breaks of
# every kind, trigraphs, controls, bidi overrides, non-ASCII, Jinja syntax.
HOSTILE = ['"', "'", "\\", "*/", "/*", "\n", "\r", "\r\n", "\u2028", "\x0b", "\x0c", "\x1c", "\x85", "??/", "??=",
           "\x00", "\x1b[31m", "\u202e", "é", "漢", "😀", "{{ x }}", "{% if %}", "#include <x>", "-->", "<!--",
           "`", "|", "<script>", "&amp;", "\t", " \\", "\\ ", "  ", "0", "7"]


def hostile_texts(rng, count=300):
    yield from HOSTILE
    for _ in range(count):
        yield "".join(HOSTILE[i] for i in rng.integers(0, len(HOSTILE), rng.integers(1, 8)))


def c_literal_bytes(literal):
    """The bytes a C++ string literal made of printable ASCII and escapes denotes."""
    assert literal.startswith('"') and literal.endswith('"')
    body, out, i = literal[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        assert 32 <= ord(c) < 127, repr(literal)
        assert c != '"', "an unescaped quote ends the literal"
        assert not (c == "?" and body[i - 1:i] == "?"), "'??' starts a trigraph"
        if c == "\\":
            if body[i + 1] in "01234567":
                assert re.fullmatch(r"[0-7]{3}", body[i + 1:i + 4]), "octal escapes take exactly three digits"
                out.append(int(body[i + 1:i + 4], 8))
                i += 4
            else:
                assert body[i + 1] in '"\\'
                out.append(ord(body[i + 1]))
                i += 2
        else:
            out.append(ord(c))
            i += 1
    return bytes(out)


def test_cpp_string_keeps_a_lone_question_mark():
    assert escaping.cpp_string("f(Tensor? w=None) -> Tensor") == '"f(Tensor? w=None) -> Tensor"'
    assert escaping.cpp_string("a ??/ b") == '"a ?\\077/ b"'


def test_cpp_string_denotes_exactly_the_text(rng):
    for text in hostile_texts(rng):
        assert c_literal_bytes(escaping.cpp_string(text)) == text.encode("utf-8")


def test_py_string_reads_back_to_the_text(rng):
    for text in hostile_texts(rng):
        literal = escaping.py_string(text)
        assert "\n" not in literal and "\r" not in literal
        assert ast.literal_eval(literal) == text


@pytest.mark.parametrize("marker", ["//", "#"])
def test_comments_stay_comments(rng, marker):
    comment = escaping.cpp_comment if marker == "//" else escaping.py_comment
    for text in hostile_texts(rng):
        out = comment(text)
        # One comment per line, split wherever C++, Python or an editor breaks a line.
        for line in out.split("\n"):
            assert line.startswith(marker), repr(out)
            assert not re.search(r"[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", line), repr(line)
            # No line splice: GCC joins a line ending in a backslash (and white space) to the next.
            assert not line.rstrip().endswith("\\"), repr(line)
            assert line == line.rstrip()
            # Controls and bidi overrides are replaced.
            assert not re.search(r"[\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]", line), repr(line)


# What would start HTML, an autolink or an entity in CommonMark (and GFM), and
# backslashes that would cancel an escape or split a table cell.
MD_HOSTILE = ["<script>", "</a>", "<!--", "<!x", "<?php", "<http://e.x>", "<=x@e.x>", "<1@e.x>", "\\<b>", "\\\\<b>",
              "&lt;", "&#60;", "&#x3c;", "\\&lt;", "\\|", "\\\\|", "R <= head_size", "a < b", "a & b", "<", "&", "@"]

# A '<' (or '&', '|') not escaped: preceded by an even number of backslashes.
_UNESCAPED = r"(?<!\\)(?:\\\\)*"
_LIVE_LT = re.compile(_UNESCAPED + r"<(?=[A-Za-z/!?]|[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]*@)")
_LIVE_AMP = re.compile(_UNESCAPED + r"&(?=#[0-9]{1,7};|#[xX][0-9a-fA-F]{1,6};|[A-Za-z][A-Za-z0-9]*;)")


def md_rendered_text(prose):
    """What CommonMark renders of the escapes md_text writes: a run of n
    backslashes before '<' or '&' is n // 2 backslashes (and an escaped '<')."""
    return re.sub(r"(\\+)(?=[<&])", lambda m: "\\" * (len(m.group(1)) // 2), prose)


def test_markdown_text_reads_as_written():
    assert escaping.md_text("R <= head_size, a < b, a > b, a & b") == "R <= head_size, a < b, a > b, a & b"
    assert escaping.md_text("<script>") == "\\<script>"
    assert escaping.md_text("&lt;") == "\\&lt;"
    assert escaping.md_text("\\<b>") == "\\\\\\<b>"  # the text's own backslash cannot cancel the escape
    assert escaping.md_cell("a <= b | c") == "a <= b \\| c"
    assert escaping.md_cell("a \\| b") == "a \\\\\\| b"
    assert escaping.md_code("R <= head_size & x | y") == "R <= head_size & x \\| y"


def test_markdown_text_and_cells_cannot_inject_markup(rng):
    texts = list(hostile_texts(rng)) + MD_HOSTILE
    texts += ["".join(rng.choice(MD_HOSTILE + HOSTILE, rng.integers(1, 6))) for _ in range(300)]
    for text in texts:
        prose = escaping.md_text(text)
        # No '<' that starts raw HTML or an autolink, no '&' that starts an entity.
        assert not _LIVE_LT.search(prose), repr(prose)
        assert not _LIVE_AMP.search(prose), repr(prose)
        # Only those, and the backslashes before them, are escaped: the text reads back.
        assert md_rendered_text(prose) == text, repr(prose)
        cell = escaping.md_cell(text)
        assert "\n" not in cell and "\r" not in cell
        assert not re.search(_UNESCAPED + r"\|", cell), repr(cell)
        assert not _LIVE_LT.search(cell) and not _LIVE_AMP.search(cell), repr(cell)
        code = escaping.md_code(text)
        assert "`" not in code and "\n" not in code and not re.search(_UNESCAPED + r"\|", code), repr(code)


def test_stamp_text_keeps_paths_plain():
    assert escaping.stamp_text("specs/a-b.yaml, specs/c.yaml") == "specs/a-b.yaml, specs/c.yaml"
    assert escaping.stamp_text("specs/x*/\n.yaml") == "specs/x?/?.yaml"
    assert escaping.stamp_text("a--b---c") == "a-?b-?-c"  # '--' would end an HTML comment
    assert "--" not in escaping.stamp_text("-" * 7)


# --- spellings --------------------------------------------------------------------------------


@pytest.mark.parametrize("single", [True, False])
def test_float_literals_read_back_exactly(rng, single):
    values = [0.0, -0.0, 1.0, 1e-6, 3.4028234663852886e38, 1e-45, 5e-324, 0.1, 2.5, -7.0]
    values += list(rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200))
    for v in values:
        if single:
            v = struct.unpack("f", struct.pack("f", v))[0]
        text = spelling.float_literal(v, single)
        assert any(c in text for c in ".en"), text  # never an integer literal
        back = float(text)
        if single:
            back = struct.unpack("f", struct.pack("f", back))[0]
        assert back == v or (back == 0 and v == 0), (v, text)


def test_bounds():
    assert spelling.bound_cpp(-(2**63)) == "(-9223372036854775807 - 1)"
    assert spelling.bound_cpp(2**63 - 1) == "9223372036854775807"
    assert spelling.bound_cpp(None) is None
    # The Python description's bounds are the model's facts, and their text the runtime's messages'
    # spelling of numbers (opgen::number_text): rms_norm's eps > 0.0.
    repo = Path(__file__).resolve().parents[2]
    description = (repo / "generated" / "python" / "opgen_ops" / "_ops" / "rms_norm.py").read_text()
    facts = next(ast.literal_eval(n.value) for n in ast.parse(description).body
                 if isinstance(n, ast.Assign) and n.targets[0].id == "FACTS")
    eps = next(a for a in facts["attrs"] if a["name"] == "eps")
    assert (eps["min"], eps["min_exclusive"], eps["min_text"], eps["range_text"]) == (0.0, True, "0.0", "> 0.0")


def test_attribute_literals():
    assert spelling.attr_literal("bool", True) == ("True", "True")
    assert spelling.attr_literal("i64", -3) == ("-3", "-3")
    assert spelling.attr_literal("f32", 1e-6) == ("1e-06", "1e-06")
    assert spelling.attr_literal("enum", "gelu") == ("'gelu'", '"gelu"')
    assert spelling.attr_literal("i64[]", [-1]) == ("(-1,)", "[-1]")
    assert spelling.attr_literal("i32[]", []) == ("()", "[]")


def tensor(name, dims, optional=False, alias=None, batch=False):
    """A tensor's facts as template_data.cc hands them over (the keyword of an output on request
    included: model/names.cc spells it)."""
    on_request = optional and not alias
    return {"name": name, "optional": optional, "alias": alias, "batch": batch, "on_request": on_request,
            "request_param": "return_" + name if on_request else None, "dims": [{"text": d} for d in dims]}


ATTR_TYPES = {"f32": {"torch_schema": "float"}, "enum": {"torch_schema": "str"}, "i64[]": {"torch_schema": "int[]"},
              "dtype": {"torch_schema": "ScalarType"}}
DTYPES = {"f8e5m2": {"python": "float8_e5m2"}}


def test_torch_schema():
    op = {"name": "upd", "inputs": [tensor("cache", ["N"]), tensor("x", ["N"]), tensor("w", ["N"], optional=True)],
          "outputs": [tensor("cache_out", [], alias="cache"), tensor("y", ["N"]), tensor("z", ["N"])],
          "attrs": [{"name": "eps", "type": "f32", "array": False, "has_default": True, "default": 0.5},
                    {"name": "mode2", "type": "enum", "array": False, "has_default": True, "default": "a"},
                    {"name": "dims", "type": "i64[]", "array": True, "has_default": False, "default": None},
                    {"name": "to", "type": "dtype", "array": False, "has_default": True, "default": "f8e5m2"}],
          "torch_kernel_name": "upd__lowered"}  # a fact (model/names.cc spells it)
    # A dtype attribute is a ScalarType, its default by torch's name, lowered or not.
    assert spelling.torch_schema(op, False, ATTR_TYPES, DTYPES) == (
        'upd(Tensor(a!) cache, Tensor x, Tensor? w=None, *, float eps=0.5, str mode2="a", int[] dims, '
        "ScalarType to=float8_e5m2) -> (Tensor, Tensor)")
    assert spelling.torch_schema(op, True, ATTR_TYPES, DTYPES) == (
        "upd__lowered(Tensor(a!) cache, Tensor x, Tensor? w=None, *, float eps=0.5, int mode2, Tensor dims, "
        "ScalarType to=float8_e5m2) -> (Tensor, Tensor)")
    # An output on request: a flag after the attributes, and a Tensor in the result all the same.
    stats = {"name": "stats", "inputs": [tensor("x", ["N"])],
             "outputs": [tensor("y", ["N"]), tensor("mean", [], optional=True)], "attrs": []}
    assert spelling.torch_schema(stats, False, ATTR_TYPES, DTYPES) == (
        "stats(Tensor x, *, bool return_mean=False) -> (Tensor, Tensor)")


def test_declared_shapes_and_tuples():
    assert spelling.declared_shape(tensor("x", ["N", "2*D"], batch=True)) == "[..., N, 2*D]"
    assert spelling.declared_shape(tensor("x", [], batch=True)) == "[...]"
    assert spelling.declared_shape(tensor("x", [])) == "[]"
    assert spelling.py_tuple([]) == "()" and spelling.py_tuple(["a"]) == "(a,)" and spelling.py_tuple("ab") == "(a, b)"


def test_cpp_enumerators_and_types():
    # Each spelling the templates once kept as their own tables (rules.h.j2, context.py).
    assert [spelling.compare_enum(o) for o in ("==", "!=", "<", "<=", ">", ">=")] == \
        ["kEq", "kNe", "kLt", "kLe", "kGt", "kGe"]
    assert [spelling.field_kind_enum(k) for k in ("dtype", "present", "requested", "batch", "symbol", "enum")] == \
        ["kDtype", "kPresent", "kRequested", "kBatch", "kSymbol", "kAttr"]
    assert spelling.attr_kind("i64[]") == "kI64Array" and spelling.attr_kind("dtype") == "kDtype"
    assert spelling.layout_cpp("rows") == "opgen::Layout::kRows"
    assert spelling.devices_cpp(["cpu", "cuda"], ["cuda", "cpu"]) == "opgen::kEveryDevice"
    assert spelling.devices_cpp(["cuda"], ["cuda", "cpu"]) == "opgen::device_bit(opgen::Device::kCuda)"
    assert spelling.attr_cpp("Mode", False, "int32_t") == "Mode"
    assert spelling.attr_cpp(None, True, "int64_t") == "opgen::Span<const int64_t>"
    assert spelling.py_annotation(["a", "b"], "str") == "Literal['a', 'b']"
    assert spelling.py_annotation(None, "float") == "float"
