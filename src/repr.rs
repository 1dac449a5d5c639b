//! Values in messages, spelt as Python spells them (`'name'`, `['a', 'b']`,
//! `(2, 3)`, `None`): the messages are the Python API's too.

use serde_json::Value;

/// `repr(s)` of a Python `str`.
pub(crate) fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `repr(list_of_str)`.
pub(crate) fn py_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_str(s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}

/// `repr(tuple_of_int)`: `()`, `(3,)`, `(2, 3)`.
pub(crate) fn py_tuple(items: &[u64]) -> String {
    match items {
        [] => "()".into(),
        [one] => format!("({one},)"),
        _ => {
            let inner: Vec<String> = items.iter().map(u64::to_string).collect();
            format!("({})", inner.join(", "))
        }
    }
}

/// `repr()` of a decoded JSON value.
pub(crate) fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_str(s),
        Value::Array(a) => {
            let inner: Vec<String> = a.iter().map(py_repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", py_str(k), py_repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelt_as_python() {
        assert_eq!(py_str("a"), "'a'");
        assert_eq!(py_str("it's"), "\"it's\"");
        assert_eq!(py_list(&["id", "img"]), "['id', 'img']");
        assert_eq!(py_tuple(&[]), "()");
        assert_eq!(py_tuple(&[3]), "(3,)");
        assert_eq!(py_tuple(&[3, 2]), "(3, 2)");
        assert_eq!(py_repr(&serde_json::json!(null)), "None");
        assert_eq!(py_repr(&serde_json::json!("../x")), "'../x'");
    }
}
