"""How spec text (docs, which a spec may fill with anything) reaches generated
code: only through these filters, never raw. Each keeps the text inside the
literal or comment it lands in, whatever it holds."""

import re
import unicodedata

# Printable ASCII but '"' and '\\': kept as they are, '?' included, so that a
# torch schema reads `Tensor? w`; a '?' after a '?' is escaped, so that no
# trigraph (`??/`) forms for a compiler that still reads them.
_CPP_PLAIN = re.compile(r'[ !#-\[\]-~]*')


def cpp_string(s):
    """A C++ string literal: printable ASCII kept, everything else octal."""
    if _CPP_PLAIN.fullmatch(s) and '??' not in s:
        return '"' + s + '"'
    out = ['"']
    previous = ''
    for b in s.encode('utf-8'):
        c = chr(b)
        if c in '"\\':
            out.append('\\' + c)
        elif 32 <= b < 127 and not (c == '?' and previous == '?'):
            out.append(c)
        else:
            out.append('\\%03o' % b)  # fixed width: never swallows a digit
        previous = c if out[-1] == c else ''
    out.append('"')
    return ''.join(out)


def py_string(s):
    """A Python string literal (repr escapes quotes, newlines, controls)."""
    return repr(str(s))


def comment_lines(s, marker):
    """Spec text as line comments: one comment per line (split wherever any
    language might break a line), control and bidi characters replaced, and
    trailing white space and backslashes dropped (GCC splices a line at a
    backslash followed by white space too), so text cannot leave the comment."""
    out = []
    for line in str(s).splitlines() or ['']:
        line = ''.join('?' if unicodedata.category(c) in ('Cc', 'Cf') else c for c in line)
        while True:
            stripped = line.rstrip().rstrip('\\')
            if stripped == line:
                break
            line = stripped
        out.append((marker + ' ' + line).rstrip())
    return '\n'.join(out)


def cpp_comment(s):
    return comment_lines(s, '//')


def py_comment(s):
    return comment_lines(s, '#')


def md_text(s):
    """Spec text as Markdown prose: HTML is escaped, so text cannot inject markup."""
    return str(s).replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')


def md_cell(s):
    """Spec text in a Markdown table cell: one line, '|' escaped."""
    return ' '.join(md_text(s).split()).replace('|', '\\|')


def md_code(s):
    """Text inside a `code span` of a table cell: no backticks, '|' escaped."""
    return ' '.join(str(s).replace('`', "'").split()).replace('|', '\\|')


def stamp_text(paths):
    """Spec paths as they appear in the generated-from stamp, a comment in
    every output: anything but plain path characters becomes '?', so a folder
    name cannot end the comment, and '--' (which would end a Markdown, that
    is HTML, comment) loses its second dash."""
    out = re.sub(r'[^a-zA-Z0-9._/, +@-]', '?', paths)
    while '--' in out:
        out = out.replace('--', '-?')
    return out


FILTERS = {
    'cpp_string': cpp_string,
    'py_string': py_string,
    'cpp_comment': cpp_comment,
    'py_comment': py_comment,
    'md_text': md_text,
    'md_cell': md_cell,
    'md_code': md_code,
}
