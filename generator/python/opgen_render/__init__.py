"""opgen's renderer: the Python that renders opgen's Jinja2 templates from the
checked model, run by opgen as `python -m opgen_render` (generator/rendering/renderer.cc
starts it and speaks its protocol, __main__.py).

- environment.py: the Jinja2 environment
- escaping.py: the filters through which spec text reaches generated code
- context.py: the templates' data, from the model's facts
- spelling.py: how facts are spelled in C++, Python and the torch schema
- plan.py: every file of a run, with its template and context
"""
