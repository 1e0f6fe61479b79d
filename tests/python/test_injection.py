"""Spec text never turns into code.

Every free-text field of the spec format (the op's `doc`, each input's and
output's `doc`, each attribute's `doc`; see docs/spec.md and
generator/reading/read_spec.cc, read_tensors.cc, read_attrs.cc) gets text that tries to break out of wherever it
lands: comment terminators, Python triple quotes, escaped quotes, C++ line
splices (a trailing backslash, also followed by a space or tab) followed by
`#include` and `import os; os.system(...)`, Jinja syntax, control characters,
non-ASCII, CR line ends, trigraphs, format strings, escape sequences. One op
per payload carries it in all of its free-text fields. The real opgen binary
generates a package from those specs, and then:

  (a) every generated .py/.pyi parses, and the docstring of each op's JAX and
      torch function holds every doc text exactly (read with ast, unchanged:
      clean=False; only the docstring as a whole is trimmed);
  (b) every generated C++ file compiles (g++ -std=c++17 -fsyntax-only, with
      the runtime, jaxlib, torch and, where present, CUDA headers
      and OPGEN_WITH_CUDA=1, so the CUDA paths are compiled too), and no doc
      line runs on into the next line (GCC's -Wcomment: a `//` comment that
      ends in a backslash swallows the following line);
  (c) the payload's marker (evil_<payload>_m) appears only inside comments and
      string literals of the generated code, and so does its code (os.system,
      #include <evil..., __import__); judged by lexers that follow the
      languages' rules (C++ line splices and raw strings; Python's tokenizer).
      The Markdown docs are not code and are not checked.

The package also holds ops whose names are the ones that the generated code's
own locals, parameters and helpers would have without their trailing '_'
(spec names never end in '_'): an input named `device`, `stack` or `t_i` (type
variable `t`), an output named `platform`, an enum attribute named `device`,
an input `x` beside an input `x_tensor`, two type variables. Their files must
compile too.

OPGEN_BINARY names the binary (default: <repo>/build/generator/opgen; the test
skips when it is missing); OPGEN_TEMPLATES, if set, is passed as --templates.
To stay fast, the C++ files of one kind compile as one translation unit that
includes them all; files named by a unit's errors are compiled on their own.
"""

import ast
import concurrent.futures
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen")).resolve()
PACKAGE = "inj_pkg"

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)
if not shutil.which("g++"):
    pytest.skip("g++ is not installed", allow_module_level=True)

# Each payload's text; "{M}" stands for its marker, evil_<name>, which must
# never reach code. Keep the payloads free of leading and trailing whitespace
# (the docstring is trimmed as a whole; "whitespace_edges" covers that).
PAYLOADS = {
    "control": "A plain doc, the control case.",
    "c_comment_end": "ends a block comment */ int {M} = 1; /* and opens another",
    "py_triple_double": 'three quotes """ + __import__("os").system("{M}") + """ end',
    "py_triple_single": "three quotes ''' + __import__('os').system('{M}') + ''' end",
    "py_unbalanced": 'one """ unbalanced, then \'\'\' another {M}',
    "escaped_quote": 'escaped quote \\" ); os.system("{M}"); x = (" and \\\' ); {M}(); (\'',
    "string_breakout": '"; {M}(); " \'; {M}(); \'',
    "splice_mid": 'a line splice \\\n#include <{M}.h>\nimport os; os.system("{M}")',
    "splice_space_mid": 'a splice, then a space \\ \n#include <{M}.h>\nimport os; os.system("{M}")',
    "splice_tab_mid": 'a splice, then a tab \\\t\n#define {M} 1\nimport os; os.system("{M}")',
    "splice_end": "text that ends in a line splice {M} \\",
    "splice_space_end": "text that ends in a line splice and a space {M} \\ ",
    "splice_tab_end": "text that ends in a line splice and a tab {M} \\\t",
    "backslashes_end": "text that ends in backslashes {M} \\\\\\",
    "splice_space_twice_end": "ends in backslash, space, backslash, space {M} \\ \\ ",
    "splice_formfeed_end": "ends in a line splice and a form feed {M} \\\x0c",
    "splice_unicode_space_end": "ends in a backslash and an ideographic space {M} \\\u3000",
    "splice_nbsp_end": "ends in a backslash and a no-break space {M} \\\u00a0",
    "splice_x1c_end": "ends in a backslash and a file separator {M} \\\x1c",
    "newline_define": 'first line\n#define {M} 1\n#include <{M}.h>\n#pragma {M}\nimport os; os.system("{M}")',
    "carriage_return": 'carriage return\r#include <{M}.h>\r\nimport os; os.system("{M}")\rthe end',
    "jinja": "{{ {M} }} {% raw %}{{ raw }}{% endraw %} {% if true %}{M}{% endif %} {# c #} {%- set {M} = 1 -%}",
    "controls": "controls \x01\x02\x03\x07\x08\x0b\x0c\x0e\x1b[31m\x1c\x1d\x1e\x1f\x7f {M} end",
    "non_ascii": "é, 日本, 🚀, nbsp\u00a0nel\u0085ls\u2028ps\u2029bom\ufeff {M} ÿ \U0001f600",
    "bidi": "bidi \u202e {M} \u2066 isolate \u2069 \u202c pop",
    "trigraph": "trigraph ??/\n#include <{M}.h>\n??= ??( ??) ??< ??> ??! ??- ??' and at the end ??/",
    "python_code": 'first\nimport os; os.system("{M}")\n    def {M}(): pass\n@{M}\nclass X: pass',
    "format_strings": '%s %d %n {0} {{M}} {{}} f"{M}" $({M}) `{M}` ${M} %({M})s',
    "escapes_literal": r"\n \t \x41 \u0041 \N{BULLET} \N{NO SUCH NAME} \0 \\ \' \" \a {M}",
    "raw_string": 'R"x( {M} )x" R"( u8R"y( ))" LR"(',
    "whitespace_edges": "\t  leading and trailing whitespace {M}  \t",
}
EDGE_TRIMMED = {"whitespace_edges"}  # the docstring is trimmed as a whole


def marker(name):
    return f"evil_{name}_m"  # no marker is a prefix of another


def payload_text(name):
    return PAYLOADS[name].replace("{M}", marker(name))


def yaml_quoted(s):
    """A YAML double-quoted scalar: printable text raw (UTF-8), the rest escaped."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0:
            out.append("\\x%02x" % o)
        elif o in (0x2028, 0x2029, 0xFEFF) or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def op_name(name):
    return "inj_" + name


def spec_text(name):
    """An op whose every free-text field holds the payload. The last output
    has a plain doc, so no payload ends the docstring."""
    d = yaml_quoted(payload_text(name))
    return f"""opgen: 1
name: {op_name(name)}
doc: {d}
inputs:
  x: {{dtype: f32, shape: [N], doc: {d}}}
  y: {{dtype: f32, shape: [N]}}
outputs:
  out: {{dtype: f32, shape: [N], doc: {d}}}
  tail: {{dtype: f32, shape: [N], doc: "the last output"}}
attrs:
  alpha: {{type: f32, default: 1.0, doc: {d}}}
  count: {{type: i64, doc: {d}}}
platforms: [cuda, cpu]
xla:
  api_versions: [4, 3, 2, 1]
"""


def op_docs(name):
    """(field, text) of every doc the op carries."""
    t = payload_text(name)
    return [("op doc", t), ("input x doc", t), ("output out doc", t), ("attr alpha doc", t),
            ("attr count doc", t)]


# Ops named like the generated code's own names (see the module docstring).
NAME_OPS = {
    "names_locals": """opgen: 1
name: inj_names_locals
types:
  t: [f32, f16]
  u: [i32, i64]
inputs:
  stack: {dtype: t, shape: [N]}
  device: {dtype: t, shape: [N]}
  t_i: {dtype: u, shape: [N]}
  stack_tensor: {dtype: f32, shape: [N], optional: true}
outputs:
  platform: {dtype: t, shape: [N]}
  num_args: {dtype: u, shape: [N]}
attrs:
  num_outputs: {type: i64, default: 1}
  known: {type: bool, default: false}
platforms: [cuda, cpu]
xla:
  api_versions: [4, 3]
""",
    "names_attrs": """opgen: 1
name: inj_names_attrs
inputs:
  x: {dtype: f32, shape: [N]}
  x_tensor: {dtype: f32, shape: [N]}
outputs:
  out: {dtype: f32, shape: [N]}
attrs:
  device: {type: enum, values: [host_like, gpu_like]}
  platform: {type: i32, default: 0}
  dims: {type: "i64[]", default: [0]}
  dims_tensor: {type: bool, default: true}
platforms: [cuda, cpu]
xla:
  api_versions: [4, 3]
""",
    # vLLM's string choice (kv_cache_dtype), and enum values that are C++
    # keywords, macros, Python keywords and the generated code's own names:
    # each is an enumerator with a trailing '_', the string as written.
    "names_enum_values": """opgen: 1
name: inj_names_enum_values
inputs:
  x: {dtype: f32, shape: [N]}
outputs:
  out: {dtype: f32, shape: [N]}
attrs:
  kv_cache_dtype: {type: enum, values: [auto, fp8, fp8_e4m3, fp8_e5m2], default: auto}
  mode: {type: enum, values: [delete, errno, assert, args, type, stream, plain]}
platforms: [cuda, cpu]
xla:
  api_versions: [4, 3]
""",
}


# --- generation ------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("injection")
    specs = root / "specs"
    specs.mkdir()
    (specs / "package.yaml").write_text(
        f"opgen: 1\npackage:\n  name: {PACKAGE}\n  torch_namespace: {PACKAGE}\n")
    for name in PAYLOADS:
        (specs / f"{op_name(name)}.yaml").write_bytes(spec_text(name).encode("utf-8"))
    for name, text in NAME_OPS.items():
        (specs / f"{op_name(name)}.yaml").write_text(text)
    out = root / "out"
    cmd = [str(OPGEN), "generate", str(specs), "-o", str(out), "--root", str(root), "--quiet"]
    if os.environ.get("OPGEN_TEMPLATES"):
        cmd += ["--templates", os.environ["OPGEN_TEMPLATES"]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"opgen refused the specs ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return out


def op_cpp_files(out, name):
    op = op_name(name)
    return [out / "include" / PACKAGE / f"{op}.h", out / "include" / PACKAGE / f"{op}_rules.h",
            out / "src" / f"{op}_xla.cc", out / "src" / f"{op}_torch.cc"]


def python_files(out):
    """The package's modules, each op's description under _ops/ included."""
    return sorted(p for p in (out / "python" / PACKAGE).rglob("*") if p.suffix in (".py", ".pyi"))


def all_files(out):
    return sorted(p for p in out.rglob("*") if p.is_file())


def test_every_file_was_generated(generated):
    for name in PAYLOADS:
        for f in op_cpp_files(generated, name):
            assert f.is_file(), f
    assert {p.name for p in python_files(generated)} >= {"jax.py", "torch.py", "__init__.py"}
    for name in PAYLOADS:
        assert (generated / "python" / PACKAGE / "_ops" / f"{op_name(name)}.py").is_file(), name


# --- (a) Python parses; docstrings hold the exact text -----------------------


def test_python_files_parse(generated):
    for path in python_files(generated):
        source = path.read_bytes().decode("utf-8")
        try:
            ast.parse(source, filename=str(path))
        except SyntaxError as e:
            pytest.fail(f"{path.name} does not parse: {e}\n{context(source, e.lineno)}")


@pytest.fixture(scope="module")
def docstrings(generated):
    """{(module, op): docstring} of every op function in jax.py and torch.py."""
    out = {}
    for module in ("jax", "torch"):
        path = generated / "python" / PACKAGE / f"{module}.py"
        tree = ast.parse(path.read_bytes().decode("utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                out[(module, node.name)] = ast.get_docstring(node, clean=False)
    return out


@pytest.mark.parametrize("module", ["jax", "torch"])
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_docstring_holds_the_exact_doc(docstrings, module, name):
    doc = docstrings.get((module, op_name(name)))
    assert doc is not None, f"{module}.{op_name(name)} has no docstring"
    for field, text in op_docs(name):
        expected = text.strip() if name in EDGE_TRIMMED and field == "op doc" else text
        assert expected in doc, f"{module}.{op_name(name)}: the {field} is not in the docstring verbatim:\n" \
                                f"  expected {expected!r}\n  docstring {doc!r}"


# --- (b) C++ compiles --------------------------------------------------------


def package_dir(name, sub):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], sub)
    return path if os.path.isdir(path) else None


@pytest.fixture(scope="module")
def include_flags():
    # <package>/include of jaxlib and torch, found without importing them (torch takes seconds).
    jaxlib, torch = (package_dir(name, "include") for name in ("jaxlib", "torch"))
    if not jaxlib:
        pytest.skip("jaxlib is not installed (its XLA FFI headers are needed)")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cuda = cuda if os.path.isfile(os.path.join(cuda, "include", "cuda_runtime_api.h")) else None
    return dict(base=[f"-I{REPO / 'runtime' / 'include'}", f"-I{jaxlib}"],
                torch=[f"-I{torch}"] if torch else None,
                cuda=["-DOPGEN_WITH_CUDA=1", f"-I{cuda}/include"] if cuda else [])


def kind_of(path):
    n = path.name
    if n.endswith("_torch.cc"):
        return "torch"
    if n.endswith("_xla.cc"):
        return "xla"
    return "header"


def compile_unit(source, flags, cwd):
    """g++ -fsyntax-only on `source` (text); returns (ok, diagnostics)."""
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-Wcomment", "-x", "c++", "-", *flags]
    p = subprocess.run(cmd, input=source, capture_output=True, text=True, cwd=cwd)
    return p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def compiled(generated, include_flags):
    """{file: (ok, diagnostics)} for every C++ file (None where the headers it
    needs are missing). The op headers go first, all in one translation unit;
    an op whose header fails has its .cc files marked failing with it (they
    include it). Then every other kind in one unit each, in parallel. Files
    that a unit's errors or -Wcomment warnings name are compiled on their own
    (their own diagnostics are what the tests read), the rest again together."""
    files = [f for name in [*PAYLOADS, *NAME_OPS] for f in op_cpp_files(generated, name)]
    by_kind = {}
    for f in files:
        by_kind.setdefault(kind_of(f), []).append(f)
    base = [f"-I{generated / 'include'}", *include_flags["base"], *include_flags["cuda"]]
    # The torch CUDA helpers of the runtime are behind USE_CUDA, as in CMakeLists.txt.
    torch_cuda = ["-DUSE_CUDA=1"] if include_flags["cuda"] else []
    extra = {"torch": include_flags["torch"] and include_flags["torch"] + torch_cuda}

    def flags_for(kind):
        if kind in extra:
            return None if extra[kind] is None else base + extra[kind]
        return base

    def unit(paths):
        return "".join(f'#include "{p}"\n' for p in paths)

    def compile_kind(kind, paths):
        flags = flags_for(kind)
        if flags is None:
            return {p: None for p in paths}
        out, remaining = {}, list(paths)
        while remaining:
            ok, diags = compile_unit(unit(remaining), flags, generated)
            culprits = blamed_files(diags)
            named = [p for p in remaining if str(p) in culprits]
            if ok and not named:
                out.update({p: (True, "") for p in remaining})
                break
            named = named or remaining  # a failure that names none of them
            for p in named:
                out[p] = compile_unit(unit([p]), flags, generated)
            remaining = [p for p in remaining if p not in named]
        return out

    results = compile_kind("header", by_kind.pop("header"))
    broken = {}
    for name in [*PAYLOADS, *NAME_OPS]:
        header = op_cpp_files(generated, name)[0]
        if not results[header][0]:
            broken[name] = results[header][1]
    for kind, paths in by_kind.items():
        keep = []
        for p in paths:
            name = next((n for n in broken if p in op_cpp_files(generated, n)), None)
            if name is None:
                keep.append(p)
            else:
                results[p] = (False, f"(not compiled: it includes {op_name(name)}.h, which fails)\n" + broken[name])
        by_kind[kind] = keep
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(by_kind)) as pool:
        for r in pool.map(lambda kv: compile_kind(*kv), by_kind.items()):
            results.update(r)
    return results


def blamed_files(diags):
    """The files that g++'s errors are in or come from through includes, and
    the files that -Wcomment warnings are in. (Notes, such as 'suggested
    alternatives', name other files; other warnings are no failure.)"""
    blamed, chain = set(), []
    for line in diags.splitlines():
        m = re.match(r"\s*(?:In file included|) from (.+?):\d+[:,]$", line)
        if m:
            chain.append(m.group(1))
            continue
        error = re.match(r"(.+?):\d+:\d+: (?:fatal error|error):", line)
        warning = re.match(r"(.+?):\d+:\d+: warning: .*\[-Wcomment\]", line)
        if error:
            blamed.add(error.group(1))
            blamed.update(chain)
        elif warning:
            blamed.add(warning.group(1))
        if not line.startswith(" ") and not line.startswith("In file included"):
            if error or warning or ": note:" in line or ": warning:" in line:
                chain = []
    return blamed


def summary(diags, limit=24):
    """g++'s errors and -Wcomment warnings, each with its source line."""
    lines, out = diags.splitlines(), []
    for i, line in enumerate(lines):
        if re.search(r": (fatal error|error):|\[-Wcomment\]", line):
            out += lines[i:i + 2]
    return "\n".join(out[:2 * limit]) or diags[:3000]


def check_compiled(compiled, paths):
    problems = []
    for p in paths:
        r = compiled[p]
        if r is None:
            continue
        ok, diags = r
        if not ok and diags.startswith("(not compiled"):
            problems.append(f"{p.name} does not compile {diags.splitlines()[0]}")
        elif not ok:
            problems.append(f"{p.name} does not compile:\n{summary(diags)}")
    return problems


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_cpp_compiles(generated, compiled, name):
    problems = check_compiled(compiled, op_cpp_files(generated, name))
    if problems and name != "control" and check_compiled(compiled, op_cpp_files(generated, "control")):
        pytest.fail("the control op fails to compile too, so this is no injection:\n" + "\n".join(problems))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", list(NAME_OPS))
def test_names_like_the_generated_code_own_compile(generated, compiled, name):
    problems = check_compiled(compiled, op_cpp_files(generated, name))
    assert not problems, "\n".join(problems)


def test_an_enum_value_reserved_in_cpp_is_an_enumerator_with_a_trailing_underscore(generated):
    """The header's enumerators (the compile above proves them valid C++) and
    the strings every binding takes: the values as written."""
    op = op_name("names_enum_values")
    header = (generated / "include" / PACKAGE / f"{op}.h").read_text()
    assert "enum class KvCacheDtype : int32_t {\n  auto_ = 0,  // 'auto' (a reserved name: its enumerator ends in " \
        "'_')\n  fp8 = 1,\n  fp8_e4m3 = 2,\n  fp8_e5m2 = 3,\n};" in header, header
    for k, v in enumerate(["delete", "errno", "assert", "args", "type", "stream"]):
        assert f"  {v}_ = {k},  // '{v}' (a reserved name" in header, (v, header)
    assert "  plain = 6,\n};" in header, header
    rules = (generated / "include" / PACKAGE / f"{op}_rules.h").read_text()
    assert '{"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}' in rules, rules
    assert '{"delete", "errno", "assert", "args", "type", "stream", "plain"}' in rules, rules
    description = (generated / "python" / PACKAGE / "_ops" / f"{op}.py").read_text()
    assert "*, str kv_cache_dtype=\"auto\", str mode) -> Tensor" in description, description
    assert "'values': ['auto', 'fp8', 'fp8_e4m3', 'fp8_e5m2']" in description, description


def test_torch_files_were_compiled(generated, compiled):
    if compiled[op_cpp_files(generated, "control")[3]] is None:
        pytest.skip("torch is not importable; the *_torch.cc files were not compiled")


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_no_doc_line_runs_into_the_next(generated, compiled, name):
    """A `//` line whose text ends in a backslash continues onto the next
    line (GCC: 'multi-line comment [-Wcomment]'): the doc has left its line."""
    bad = []
    for p in op_cpp_files(generated, name):
        r = compiled[p]
        if r and "-Wcomment" in r[1]:
            bad.append(f"{p.name}:\n" + "\n".join(l for l in r[1].splitlines() if "Wcomment" in l or p.name in l)[:2000])
    assert not bad, "\n".join(bad)


# --- (c) the payload stays inside comments and string literals ---------------


def cpp_code(source):
    """The C++ source with comments and string/char literals blanked, after
    line splicing (as translation phases 2 and 3 do it; GCC also splices a
    backslash followed by spaces before the newline)."""
    s = source.replace("\r\n", "\n").replace("\r", "\n")  # GCC's line ends
    s = re.sub(r"\\[ \t\f\v]*\n", "", s)
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if s.startswith("//", i):
            j = s.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
        elif s.startswith("/*", i):
            j = s.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif c == "R" and i + 1 < n and s[i + 1] == '"' and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")
                                                              or s[i - 1] in "LuU8"):
            m = re.match(r'R"([^ ()\\\t\v\f\n]{0,16})\(', s[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = s.find(")" + m.group(1) + '"', i + m.end())
            i = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""')
        elif c in "\"'":
            j = i + 1
            while j < n and s[j] != c and s[j] != "\n":
                j += 2 if s[j] == "\\" else 1
            i = j + 1
            out.append('""')
        else:
            out.append(c)
            i += 1
    return "".join(out)


def python_code(source):
    """The tokens of Python source that are neither comments nor strings."""
    skip = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE}
    skip |= {getattr(tokenize, t) for t in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, t)}
    toks = tokenize.generate_tokens(io.StringIO(source).readline)
    return " ".join(t.string for t in toks if t.type not in skip)


@pytest.fixture(scope="module")
def code_only(generated):
    """{file: its code with comments and string literals removed}."""
    out = {}
    for p in all_files(generated):
        text = p.read_bytes().decode("utf-8")  # no newline translation
        if p.suffix in (".py", ".pyi"):
            try:
                out[p] = python_code(text)
            except (tokenize.TokenError, SyntaxError, IndentationError) as e:
                out[p] = f"<does not tokenize: {e}>"
        elif p.suffix in (".h", ".cc"):
            out[p] = cpp_code(text)
        elif p.suffix == ".cmake":
            out[p] = re.sub(r"#.*", "", text)
        # Other files are not code: py.typed, and the Markdown docs, where
        # the doc text is the content.
    return out


def test_the_lexers_see_code():
    """The check below is able to fail: payloads outside comments and strings are found."""
    assert "evil_x" in cpp_code('// c\nint evil_x; "evil_y"')
    assert "evil_y" not in cpp_code('// c\nint evil_x; "evil_y"')
    assert "evil_z" in cpp_code("// comment \\\n\n#include <evil_z>")
    assert "evil_z" not in cpp_code("// comment \\\n#include <evil_z>")
    assert "evil_r" not in cpp_code('auto s = R"d( ")" evil_r )d"; int k;') and "int k" in cpp_code('R"d(x)d"; int k;')
    assert "evil_p" in python_code('"""doc"""\nimport os; os.system("evil_p")\nevil_p()\n')
    assert "evil_p" not in python_code('"""import os; evil_p()"""  # evil_p\n')


# Payload code that must not appear outside comments and strings even where
# its marker sits inside a string (os.system("evil_x")). {is_python: patterns}
LEAK_PATTERNS = {
    True: [r"\bos\s*\.\s*system\b", r"\bimport\s+os\b", r"\b__import__\b", r"\bclass\s+X\b"],
    False: [r"\bos\s*\.\s*system\b", r"#\s*include\s*<evil", r"#\s*define\s+evil", r"#\s*pragma\s+evil",
            r"\b__import__\b"],
}


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_payload_stays_in_comments_and_strings(generated, code_only, name):
    """The payload's marker, in any generated file; its code (os.system,
    #include <evil...>, ...), in the op's own files (see the next test for
    the package's shared files)."""
    m = marker(name)
    own = set(op_cpp_files(generated, name))
    leaks = []
    for p, code in code_only.items():
        if m in code:
            text = p.read_bytes().decode("utf-8")
            lines = [f"  {i + 1}: {l!r}" for i, l in enumerate(text.splitlines()) if m in l]
            leaks.append(f"{p.relative_to(generated)}: '{m}' outside comments and strings, on lines\n" + "\n".join(lines[:8]))
        if p in own:
            leaks += code_leaks(generated, p, code)
    assert not leaks, "\n".join(leaks)


def test_no_payload_code_in_the_package_files(generated, code_only):
    """module.cc, the Python modules and stubs, the CMake list: they hold every
    op, so a leak there is not tied to one payload's marker."""
    own = {f for name in PAYLOADS for f in op_cpp_files(generated, name)}
    leaks = []
    for p, code in code_only.items():
        if p not in own:
            leaks += code_leaks(generated, p, code)
    assert not leaks, "\n".join(leaks)


def code_leaks(generated, path, code):
    if code.startswith("<does not tokenize"):
        return [f"{path.relative_to(generated)}: {code}"]
    out = []
    for pattern in LEAK_PATTERNS[path.suffix in (".py", ".pyi")]:
        found = re.search(pattern, code)
        if found:
            out.append(f"{path.relative_to(generated)}: {found.group(0)!r} outside comments and strings")
    return out


def test_spec_folder_names_stay_in_the_stamp_comments(tmp_path):
    """Not a free-text field, but spec text all the same: the stamp on the
    first line of every file names the spec paths, folders included, and a
    folder name may hold a newline."""
    m = "evil_folder_m"
    # In Python the rest of the stamp becomes a comment again ('#'); in C++,
    # '#include <...>' would be live as well.
    folder = tmp_path / f'specs\nimport os; {m} = os.system  #'
    folder.mkdir()
    (folder / "package.yaml").write_text(f"opgen: 1\npackage:\n  name: {PACKAGE}\n  torch_namespace: {PACKAGE}\n")
    (folder / "inj_control.yaml").write_text(spec_text("control"))
    out = tmp_path / "out"
    cmd = [str(OPGEN), "generate", str(folder), "-o", str(out), "--root", str(tmp_path), "--quiet"]
    if os.environ.get("OPGEN_TEMPLATES"):
        cmd += ["--templates", os.environ["OPGEN_TEMPLATES"]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    leaks = []
    for path in all_files(out):
        text = path.read_bytes().decode("utf-8")
        if path.suffix in (".py", ".pyi"):
            try:
                ast.parse(text)
                code = python_code(text)
            except (SyntaxError, tokenize.TokenError) as e:
                leaks.append(f"{path.relative_to(out)} does not parse: {e}")
                continue
        elif path.suffix in (".h", ".cc"):
            code = cpp_code(text)
        else:
            continue
        leaks += code_leaks(out, path, code)
        if m in code:
            lines = [f"  {i + 1}: {l!r}" for i, l in enumerate(text.splitlines()[:6]) if m in l or i == 0]
            leaks.append(f"{path.relative_to(out)}: '{m}' outside comments and strings\n" + "\n".join(lines))
    assert not leaks, "\n".join(leaks)


def context(source, lineno, around=2):
    lines = source.splitlines()
    lo, hi = max(0, (lineno or 1) - 1 - around), min(len(lines), (lineno or 1) + around)
    return "\n".join(f"{i + 1:5}: {lines[i]!r}" for i in range(lo, hi))
