"""The templates' data: the model's facts as opgen's C++ reader resolved them
(plain dicts and lists, template_data.cc, with the names model/names.h
derives from spec names), with the views and spellings the templates read
added once per op (derived here, spelled by spelling.py).
Every value stays a dict, list, str, int or bool (what Jinja2 reads
without a custom filter or test)."""

from . import spelling as sp


def package_data(package, dtypes):
    return dict(package, dtypes=dtypes)  # the facts (template_data.cc's package_facts) and the dtype table


def op_data(op, package, dtypes, attr_types):
    """The context of one op: `op` is its facts (template_data.cc)."""
    by_name = {d['name']: d for d in dtypes}
    inputs = [_tensor(op, t, i, True, by_name) for i, t in enumerate(op['inputs'])]
    outputs = [_tensor(op, t, i, False, by_name) for i, t in enumerate(op['outputs'])]
    workspaces = [_tensor(op, t, i, False, by_name) for i, t in enumerate(op['workspaces'])]
    for t in outputs:
        if t['alias']:
            t['alias_index'] = next(i for i, x in enumerate(op['inputs']) if x['name'] == t['alias'])
    # Each output made only when the caller asks: its bit in the request mask,
    # and the keyword that asks for it.
    requested = [t for t in outputs if t['on_request']]
    for k, t in enumerate(requested):
        t['request'] = k
    for w in workspaces:
        w['devices_cpp'] = sp.devices_cpp(w['platforms'], op['platforms'])
    for t in inputs:
        t['aliased_by'] = next((o['name'] for o in op['outputs'] if o['alias'] == t['name']), None)
    attrs = [_attr(a, attr_types, by_name) for a in op['attrs']]
    # The integer attributes an output's shape names: every binding reads
    # them before it sizes the outputs (the others after, so that a legacy
    # call refused for one of them still poisons its outputs).
    named = set()
    for t in outputs:
        for d in t['dims']:
            if 'tree' in d:
                _tree_names(d['tree'], named)
    for k, a in enumerate(attrs):
        a['index'] = k
        a['sizes_outputs'] = a['name'] in named
    required = [t for t in inputs if not t['optional']]
    type_vars = []
    fields = 0  # the descriptor's dtype fields: one per variable an input binds
    for v in op['type_vars']:
        kind = 'derived' if v['from'] else 'chosen' if v['choices'] else 'attr' if v['attr'] else 'input'
        source = next((u for u in op['type_vars'] if u['name'] == v['from']), None)
        type_vars.append({
            'name': v['name'],
            'kind': kind,
            'dtypes': [by_name[d] for d in v['dtypes']],
            'names': ', '.join(v['dtypes']),
            # The first required input whose dtype the variable is: it binds the variable.
            'bound_by': next(t['name'] for t in required if t['type_var'] == v['name']) if kind == 'input' else None,
            'field': fields if kind == 'input' else None,
            'from': v['from'],
            # Derived: (a dtype of `from`, its own), in the order of from's dtypes.
            'map': [(by_name[a], by_name[b]) for a, b in zip(source['dtypes'], v['map'])] if source else [],
            'map_text': ', '.join(a + ' -> ' + b for a, b in zip(source['dtypes'], v['map'])) if source else '',
            'attr': v['attr'],
            'attr_index': next(k for k, a in enumerate(op['attrs']) if a['name'] == v['attr']) if v['attr'] else None,
            # Chosen: for each value of the enum attribute, in its order, a dtype or a variable.
            'choices': [{'value': value, 'dtype': by_name[d] if d else None, 'var': var}
                        for value, d, var in v['choices']],
        })
        fields += kind == 'input'
    legacy = [v for v in op['api_versions'] if v != 4]
    # The facts as they are (template_data.cc's op_facts: among them `state`, {doc, platforms,
    # names} or None, and `targets`, each (platform, api_version) that gets a handler with its
    # target and symbol), with the views the templates read added or put in a fact's place.
    out = dict(op, **{
        # The facts as they came (the Python description is written from them whole: op_spec.py.j2).
        'facts': op,
        'namespace': package['name'] + '::' + op['name'],
        'inputs': inputs,
        'required_inputs': required,
        'outputs': outputs,
        'requested_outputs': requested,  # made only when the caller asks for them
        'aliased_outputs': [t for t in outputs if t['alias']],  # an input's buffer, updated in place
        'workspaces': workspaces,
        # How many workspaces a call allocates on each platform.
        'workspaces_on': {p: sum(1 for w in workspaces if p in w['platforms']) for p in ('cpu', 'cuda')},
        'attrs': attrs,
        'states': {p: op['state']['names'][p] for p in (op['state']['platforms'] if op['state'] else [])},
        # Each constraint with the optional inputs it needs (those that bind a
        # symbol it names, which no required input gives): checked when given.
        'constraints': [dict(c, needs_inputs=sorted({s['input'] for s in op['symbols'] if s['name'] in c['names']
                                                     and op['inputs'][s['input']]['optional']}),
                             compare=None if c['operator'] == 'in' else sp.compare_enum(c['operator']))
                        for c in op['constraints']],
        'symbols': [dict(s, input_name=op['inputs'][s['input']]['name'], where=sp.binding_place(op, s))
                    for s in op['symbols']],
        'cuda': 'cuda' in op['platforms'],
        'cpu': 'cpu' in op['platforms'],
        'ffi': 4 in op['api_versions'],
        'legacy_versions': legacy,
        'opaque': _opaque(op),
        'torch_schema': sp.torch_schema(op, False, attr_types, by_name),
        'torch_kernel_schema': sp.torch_schema(op, op['torch_lowered'], attr_types, by_name),
        'has_batch': any(t['batch'] for t in op['inputs'] + op['outputs']),
        # The input whose leading dimensions define the batch.
        'batch_source': next((t['name'] for t in op['inputs'] if t['batch'] and not t['optional']), None),
        'type_vars': type_vars,
        # torch_xla passes attributes only through the opaque backend_config, so
        # its custom call uses the first legacy version the spec lists.
        'torch_xla_api_version': legacy[0] if legacy else 0,
    })
    out.update(sp.cpp_templates(op, by_name))
    return out


def _tensor(op, t, index, is_input, dtypes):
    dims = []
    for axis, d in enumerate(t['dims']):
        dim = {'axis': axis, 'text': d['text'], 'size': d['size'], 'symbol': d['symbol'], 'kind': d['kind']}
        # (Why a dimension must have its size, in a shape error, the runtime's Binder says
        # from the symbol and its binding: no message text is made here.)
        if d['kind'] == 'expr':
            dim['tree'] = d['tree']
        elif d['kind'] == 'symbol' and not any(s['name'] == d['symbol'] for s in op['symbols']):
            # An output or workspace sized by an integer attribute: a size the
            # bindings check as they check an expression's (it may be negative).
            dim['tree'] = {'kind': 'symbol', 'symbol': d['symbol']}
        elif d['kind'] == 'symbol':
            binding, s = next((k, s) for k, s in enumerate(op['symbols']) if s['name'] == d['symbol'])
            binds = is_input and s['input'] == index and s['axis'] == axis
            dim['kind'] = 'bind' if binds else 'symbol'
            dim['binding'] = binding  # the symbol's index in binding order
        dims.append(dim)
    # The facts as they are (template_data.cc's tensor_facts), with the views the templates read
    # added, or put in the place of a fact: the dtype's row of the table for its name, the
    # dimensions with their bindings.
    return dict(
        t,
        index=index,
        dtype=None if t['type_var'] else dtypes[t['dtype']],
        dtype_text=t['type_var'] or t['dtype'],
        layout_cpp=sp.layout_cpp(t['layout']),
        stride_count=len(dims) + (1 if t['batch'] else 0),
        alias_index=None,
        aliased_by=None,
        py_param=t['name'] + '=None' if t['optional'] else t['name'],
        rank=len(dims),
        declared=sp.declared_shape(t),
        dims=dims,
    )


def _tree_names(tree, out):
    """Adds each name an expression tree (template_data.cc's) uses to `out`."""
    if tree['kind'] == 'symbol':
        out.add(tree['symbol'])
    elif tree['kind'] != 'int':
        _tree_names(tree['lhs'], out)
        _tree_names(tree['rhs'], out)


def _attr(a, attr_types, dtypes):
    info = attr_types[a['type']]
    enum = a['type'] == 'enum'
    array = a['array']
    dtype = a['type'] == 'dtype'
    element = attr_types[a['element_type']]
    if dtype:
        # A dtype attribute's values as Python and its messages name them (float8_e4m3fn).
        a = dict(a, values=[dtypes[v]['python'] for v in a['values']],
                 default=dtypes[a['default']]['python'] if a['has_default'] else None)
    quoted = ', '.join("'" + v + "'" for v in a['values'])
    literal = sp.attr_literal(a['type'], a['default']) if a['has_default'] else ('', '')
    # The facts as they are (template_data.cc's attr_facts; a dtype attribute's dtypes as Python
    # names them), with the views the templates read.
    return dict(
        a,
        kind='enum' if enum else 'array' if array else 'dtype' if dtype else 'scalar',
        attr_kind=sp.attr_kind(a['type']),  # its opgen::AttrKind
        cpp=sp.attr_cpp(a['enum_type'] if enum else None, array, info['cpp']),  # the kernel's Args field
        values_text=', '.join(a['values']),
        type_text='one of ' + quoted if enum else 'a dtype, one of ' + ', '.join(a['values']) if dtype else (element['name'] + '[' + (str(a['size']) if a['size'] is not None else '') + ']') if array else a['type'],
        py_annotation=sp.py_annotation(a['values'] if enum else None, info['py_type']),
        default_py=literal[0],
        py_param=a['name'] + '=' + literal[0] if a['has_default'] else a['name'],
        min_cpp=sp.bound_cpp(a['min']),
        max_cpp=sp.bound_cpp(a['max']),
    )


def _opaque(op):
    o = op['opaque']
    return dict(o, fingerprint=sp.hex64(o['fingerprint']),
                fields=[dict(f, enum=sp.field_kind_enum(f['kind'])) for f in o['fields']])

