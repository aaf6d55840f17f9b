//! The `**options` of the entry points: settings that several entry points take are declared once,
//! as a group (`keyword_group!`), and taken from the keyword arguments group by group
//! (`keywords`). A missing required key, or a key that no group takes, is a TypeError as Python
//! gives for a named parameter; a value of the wrong type fails as it would there too.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The keyword arguments of one call, as the groups take them.
pub struct Keywords<'a, 'py> {
    function: &'static str,
    given: Option<&'a Bound<'py, PyDict>>,
    taken: Vec<&'static str>,
}

impl<'py> Keywords<'_, 'py> {
    /// The value of `key`, or `default` where the call leaves it out (None: it is required).
    pub fn take<T: FromPyObjectOwned<'py>>(
        &mut self,
        key: &'static str,
        default: Option<T>,
    ) -> PyResult<T> {
        self.taken.push(key);
        let value = match self.given {
            Some(given) => given.get_item(key)?,
            None => None,
        };
        match (value, default) {
            (Some(value), _) => value.extract::<T>().map_err(|e| {
                let e: PyErr = e.into();
                // As PyO3 marks a named parameter's error (Python < 3.11 has no notes).
                let _ = e
                    .value(value.py())
                    .call_method1("add_note", (format!("while processing '{key}'"),));
                e
            }),
            (None, Some(default)) => Ok(default),
            (None, None) => Err(PyTypeError::new_err(format!(
                "{}() missing 1 required keyword argument: '{key}'",
                self.function
            ))),
        }
    }

    /// Fails on the first key given that no group took.
    fn finish(self) -> PyResult<()> {
        let Some(given) = self.given else {
            return Ok(());
        };
        for key in given.keys() {
            let key: String = key.extract()?;
            if !self.taken.contains(&key.as_str()) {
                return Err(PyTypeError::new_err(format!(
                    "{}() got an unexpected keyword argument '{key}'",
                    self.function
                )));
            }
        }
        Ok(())
    }
}

/// Settings taken from keyword arguments (declared by `keyword_group!`, or a tuple of groups).
pub trait Group<'py>: Sized {
    fn take(keywords: &mut Keywords<'_, 'py>) -> PyResult<Self>;
}

impl<'py, A: Group<'py>, B: Group<'py>> Group<'py> for (A, B) {
    fn take(keywords: &mut Keywords<'_, 'py>) -> PyResult<Self> {
        Ok((A::take(keywords)?, B::take(keywords)?))
    }
}

impl<'py, A: Group<'py>, B: Group<'py>, C: Group<'py>> Group<'py> for (A, B, C) {
    fn take(keywords: &mut Keywords<'_, 'py>) -> PyResult<Self> {
        Ok((A::take(keywords)?, B::take(keywords)?, C::take(keywords)?))
    }
}

/// The settings `G` (a group, or a tuple of groups) from the keyword arguments `options` of a
/// call to `function`; every key given must belong to one of them.
pub fn keywords<'py, G: Group<'py>>(
    function: &'static str,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<G> {
    let mut keywords = Keywords {
        function,
        given: options,
        taken: Vec::new(),
    };
    let group = G::take(&mut keywords)?;
    keywords.finish()?;
    Ok(group)
}

/// A struct of settings that entry points take from their keyword arguments, one field a key
/// (the field's name), `= default` after a field that may be left out.
macro_rules! keyword_group {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident $(<$lt:lifetime>)? {
            $($(#[$field_attr:meta])* $field:ident: $ty:ty $(= $default:expr)?),* $(,)?
        }
    ) => {
        $(#[$attr])*
        $vis struct $name $(<$lt>)? {
            $($(#[$field_attr])* pub $field: $ty,)*
        }

        impl<'py> $crate::py::keywords::Group<'py> for $name $(<$lt>)? {
            fn take(
                keywords: &mut $crate::py::keywords::Keywords<'_, 'py>,
            ) -> pyo3::PyResult<Self> {
                Ok($name {
                    $($field: keywords.take(
                        stringify!($field),
                        $crate::py::keywords::keyword_group!(@default $($default)?),
                    )?,)*
                })
            }
        }
    };
    (@default) => { None };
    (@default $default:expr) => { Some($default) };
}
pub(crate) use keyword_group;
