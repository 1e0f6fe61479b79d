"""How the model's facts are spelled in the languages opgen writes: C++
types, expressions and enumerators, Python literals and parameters, the
torch schema. The templates read these through the context (context.py),
which keeps no spelling of its own, nor do the templates. The names of each
dtype (C++ type, enumerator, numpy's and torch's name) are not here: they
are the dtype table's (runtime/include/opgen/dtype_table.h), which the C++
runtime reads too, and come with the facts (template_data.cc). Nor are the
names derived from spec names (return_<output>, <input>_strides, the XLA
targets, <op>__lowered, ...): they are the C++ model's (model/names.h),
which checks them against the spec's names, and come with the facts too."""

import math


def comma_list(items):
    return ', '.join(items)


def py_tuple(items):
    """Python source of a tuple of the given item sources: (), (a,), (a, b)."""
    items = list(items)
    return '(' + items[0] + ',)' if len(items) == 1 else '(' + comma_list(items) + ')'


def py_data(value, head='', width=320):
    """`head` and then `value` (facts: dicts, lists, str, int, float, bool, None) as
    Python source, laid out as `ruff format` lays it out (generated/ruff.toml):
    `value` one item a line, each item on one line where it fits in `width`,
    else one item of its own a line, and so on down (strings never break).
    Each collection broken over lines ends in a comma, which keeps it so."""
    return '\n'.join(_data_lines(value, head, '', 0, width, True))


def _data_lines(value, head, tail, indent, width, expand=False):
    pad = ' ' * indent
    items = list(value.items()) if isinstance(value, dict) else value if isinstance(value, list) else None
    if not items or not expand and len(pad + head) + len(_data_text(value)) + len(tail) <= width:
        return [pad + head + _data_text(value) + tail]
    opening, closing = '{}' if isinstance(value, dict) else '[]'
    out = [pad + head + opening]
    for item in items:
        if isinstance(value, dict):
            out += _data_lines(item[1], _data_text(item[0]) + ': ', ',', indent + 4, width)
        else:
            out += _data_lines(item, '', ',', indent + 4, width)
    return out + [pad + closing + tail]


def _data_text(value):
    """`value` as Python source on one line."""
    if isinstance(value, dict):
        return '{' + ', '.join(_data_text(k) + ': ' + _data_text(v) for k, v in value.items()) + '}'
    if isinstance(value, list):
        return '[' + ', '.join(_data_text(v) for v in value) + ']'
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError('%r has no Python literal' % value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return repr(value)  # a str's repr escapes quotes, newlines and controls
    raise TypeError('%r is not a fact' % (value,))


def float_literal(v, single):
    """A literal that reads back to exactly `v` (in f32 when `single`), in C++ and Python."""
    s = '%.9g' % v if single else '%.17g' % v
    return s if any(c in s for c in '.en') else s + '.0'


INT64_MIN = -(2**63)


def int_cpp(v):
    """An integer as C++ source: -2^63 has no literal (2^63 does not fit), so it is an expression."""
    return '(-9223372036854775807 - 1)' if v == INT64_MIN else str(v)


def bound_cpp(v):
    """A range bound as a C++ literal (an expression for -2^63)."""
    if v is None:
        return None
    if isinstance(v, int):
        return int_cpp(v)
    return float_literal(v, False)


def attr_literal(attr_type, v):
    """An attribute value as (Python source, torch schema default)."""
    if isinstance(v, bool):
        t = 'True' if v else 'False'
        return t, t
    if isinstance(v, int):
        return str(v), str(v)
    if isinstance(v, float):
        t = float_literal(v, attr_type == 'f32')
        return t, t
    if isinstance(v, str):
        # Enum values are snake_case names: nothing to escape.
        return "'" + v + "'", '"' + v + '"'
    items = [str(x) for x in v]
    # A tuple, so that a default is never a shared mutable list.
    return py_tuple(items), '[' + comma_list(items) + ']'


def torch_schema(op, lowered, attr_types, dtypes):
    """The torch.library schema: tensors positional, attributes keyword-only
    with their defaults, e.g. "simple_add(Tensor a, Tensor b, *, float alpha=1.0) -> Tensor".
    A tensor updated in place is a mutable alias, `Tensor(a!)`; torch custom ops
    may not return it, so only the other outputs are returned. The lowered
    schema is what the stable-ABI kernel registers when the op has attributes
    that ABI cannot carry on torch 2.9 (str, int[]): an enum as its index, an
    array as a CPU tensor."""
    s = (op['torch_kernel_name'] if lowered else op['name']) + '('
    alias_set = ord('a')
    mutated = {o['alias'] for o in op['outputs'] if o['alias']}
    params = []
    for t in op['inputs']:
        kind = 'Tensor'
        if t['name'] in mutated:
            kind = 'Tensor(%s!)' % chr(alias_set)
            alias_set += 1
        params.append(kind + ('?' if t['optional'] else '') + ' ' + t['name'] + ('=None' if t['optional'] else ''))
    s += ', '.join(params)
    requests = [o for o in op['outputs'] if o['on_request']]
    if op['attrs'] or requests:
        s += ', *'
    for a in op['attrs']:
        if lowered and a['type'] == 'enum':
            s += ', int ' + a['name']
        elif lowered and a['array']:
            s += ', Tensor ' + a['name']
        else:
            s += ', ' + attr_types[a['type']]['torch_schema'] + ' ' + a['name']
            if a['has_default'] and a['type'] == 'dtype':
                s += '=' + dtypes[a['default']]['python']  # a ScalarType by its name: float8_e4m3fn
            elif a['has_default']:
                s += '=' + attr_literal(a['type'], a['default'])[1]
    # An output on request is asked for by a flag; not asked, it is returned
    # with no elements (a custom op returns no Tensor?).
    for o in requests:
        s += ', bool ' + o['request_param'] + '=False'
    s += ') -> '
    fresh = sum(1 for o in op['outputs'] if not o['alias'])
    return s + ('Tensor' if fresh == 1 else '(' + ', '.join(['Tensor'] * fresh) + ')')


def declared_shape(t):
    """A tensor's shape as the spec writes it: [..., N, 2*D]."""
    out = '['
    if t['batch']:
        out += '...' if not t['dims'] else '..., '
    return out + ', '.join(d['text'] for d in t['dims']) + ']'


def binding_place(op, symbol):
    """Where a shape symbol gets its value, as messages say it: "input 'x'
    dimension 0 after its '...'"."""
    t = op['inputs'][symbol['input']]
    return "input '%s' dimension %d%s" % (t['name'], symbol['axis'], " after its '...'" if t['batch'] else '')


_ATTR_KINDS = {'bool': 'kBool', 'i32': 'kI32', 'i64': 'kI64', 'f32': 'kF32', 'f64': 'kF64', 'enum': 'kEnum',
               'i32[]': 'kI32Array', 'i64[]': 'kI64Array', 'dtype': 'kDtype'}


def attr_kind(attr_type):
    """An attribute type's enumerator of opgen::AttrKind: i32[] -> kI32Array."""
    return _ATTR_KINDS[attr_type]


_COMPARES = {'==': 'Eq', '!=': 'Ne', '<': 'Lt', '<=': 'Le', '>': 'Gt', '>=': 'Ge'}


def compare_enum(operator):
    """A constraint's operator as opgen::Compare's enumerator: <= -> kLe."""
    return 'k' + _COMPARES[operator]


_FIELD_KINDS = {'dtype': 'kDtype', 'present': 'kPresent', 'requested': 'kRequested', 'batch': 'kBatch',
                'symbol': 'kSymbol'}


def field_kind_enum(kind):
    """A descriptor field's kind as opgen::opaque::Field's enumerator (kAttr
    for an attribute of any type: scalar, enum, array)."""
    return _FIELD_KINDS.get(kind, 'kAttr')


def hex64(v):
    return '0x%016X' % v  # ruff's spelling: upper-case digits


def devices_cpp(platforms, op_platforms):
    """The platforms a workspace is allocated on, as a mask of opgen::device_bit."""
    if len(platforms) == len(op_platforms):
        return 'opgen::kEveryDevice'
    return ' | '.join('opgen::device_bit(opgen::Device::k%s)' % ('Cuda' if p == 'cuda' else 'Cpu') for p in platforms)


def layout_cpp(layout):
    """contiguous, rows, strided -> the opgen::Layout enumerator."""
    return 'opgen::Layout::k' + layout.capitalize()


def attr_cpp(enum_type, array, cpp):
    """The type of an attribute's Args field, which the kernel reads: its enum
    type, a Span of its elements, or its C++ type (`cpp`, of one element)."""
    return enum_type if enum_type else 'opgen::Span<const ' + cpp + '>' if array else cpp


def py_annotation(enum_values, py_type):
    """An attribute's Python annotation: Literal['a', 'b'] for an enum, else its type's."""
    return 'Literal[' + ', '.join("'" + v + "'" for v in enum_values) + ']' if enum_values else py_type


def cpp_templates(op, dtypes):
    """The C++ spellings of the type variables: the template parameters, the
    Args type, each instantiation (the model's, in its order), and the index
    of an instantiation in the header's Instantiations: from each variable's
    position <V>_i_ among its dtypes (the first varies slowest) where the
    instantiations are a product, else (a chosen variable) by looking the
    bound dtypes up in the list of them."""
    names = [v['name'] for v in op['type_vars']]
    params = ', '.join('typename ' + n for n in names)
    index, stride, rows = '', 1, ''
    if any(v['choices'] for v in op['type_vars']):
        rows = ', '.join('{' + ', '.join('opgen::DType::' + dtypes[d]['enum'] for d in row) + '}'
                         for row in op['instantiations'])
        index = 'opgen::row_of(kRows, {' + ', '.join(n + '_' for n in names) + '})'
    else:
        # The combinations are over the free variables; a derived one follows its own.
        for v in reversed([v for v in op['type_vars'] if not v['from']]):
            term = v['name'] + '_i_' + ('' if stride == 1 else ' * %d' % stride)
            index = term if not index else term + ' + ' + index
            stride *= len(v['dtypes'])
    template_args = ['<' + ', '.join(dtypes[d]['cpp'] for d in row) + '>' if names else ''
                     for row in op['instantiations']]
    return {
        'template_params': params,
        # `template <typename T>` before a declaration over Args, and its Args type.
        'template_decl': 'template <' + params + '>\n' if names else '',
        'args_type': 'Args<' + ', '.join(names) + '>' if names else 'Args',
        'instantiation_index': index or '0',
        # Where a chosen variable numbers them by a search: each instantiation's dtypes, as C++ rows.
        'instantiation_rows': rows,
        'instantiations': [{'template_args': t} for t in template_args],
        'instantiation_types': ', '.join('Args' + t for t in template_args),
    }
