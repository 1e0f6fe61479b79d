"""opgen's renderer: the Python that opgen embeds to render its Jinja2
templates from the checked model (generator/renderer.cc drives it).

- environment.py: the Jinja2 environment
- escaping.py: the filters through which spec text reaches generated code
- context.py: the templates' data, from the model's facts
- spelling.py: how facts are spelled in C++, Python and the torch schema
- plan.py: every file of a run, with its template and context
"""
