//! The members of a client's request that its dialect module has no field for, so that translation
//! refuses them (or drops them when the alias says so) instead of losing them unseen
//! (docs/translation-policy.md: nothing is dropped silently).
//!
//! A request struct collects them with `#[serde(flatten, borrow)] rest: Rest<'a>` in the same parse
//! as its fields: serde hands the struct's own members to their fields directly and only the others
//! to [`Rest`], so a request that has none costs nothing more.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::dialect::neutral::Request;

/// The members of one object that its struct does not read, each with whether it is set (not
/// `null`: a member that is `null` asks for nothing).
#[derive(Default, Debug)]
pub struct Rest(Vec<(String, bool)>);

impl Rest {
    /// Whether the object had no member beyond its struct's fields.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The set members, but those in `ignored`.
    pub fn set<'s>(&'s self, ignored: &'s [&str]) -> impl Iterator<Item = &'s str> + 's {
        self.0
            .iter()
            .filter(|(k, set)| *set && !ignored.contains(&k.as_str()))
            .map(|(k, _)| k.as_str())
    }

    /// Notes each set member not in `ignored` as a part with no counterpart upstream, named by
    /// the object's path (`path`, `""` at the top level) and the member (`speed`,
    /// `thinking.mode`, `messages[].content[].citations`), found at `at` and the member.
    pub fn note(&self, r: &mut Request<'_>, path: &str, at: &dyn Fn() -> String, ignored: &[&str]) {
        for k in self.set(ignored) {
            let at = || join(&at(), k);
            r.unmapped(join(path, k), at);
        }
    }
}

/// `object.member`, or the member alone at the top level.
pub fn join(object: &str, member: &str) -> String {
    if object.is_empty() {
        member.to_owned()
    } else {
        format!("{object}.{member}")
    }
}

/// A place in the request (`messages[2].content[0]`) as the path of the part it holds, array
/// indices left out (`messages[].content[]`): what a `drop` list and the policy's tables name.
pub fn path_of(at: &str) -> String {
    let mut out = String::with_capacity(at.len());
    let mut in_index = false;
    for c in at.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

impl<'de> Deserialize<'de> for Rest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Rest;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Rest, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = m.next_key::<String>()? {
                    let set = m.next_value::<Option<IgnoredAny>>()?.is_some();
                    v.push((k, set));
                }
                Ok(Rest(v))
            }
        }
        d.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    #[derive(Deserialize)]
    struct S<'a> {
        #[serde(borrow)]
        a: &'a RawValue,
        #[serde(default)]
        b: Option<u64>,
        #[serde(flatten)]
        rest: Rest,
    }

    #[test]
    fn members_without_a_field_are_collected_in_the_same_parse() {
        let s: S =
            serde_json::from_str(r#"{"a":[1,{"x":2}],"z":{"q":[1]},"b":5,"n":null}"#).unwrap();
        assert_eq!(s.a.get(), r#"[1,{"x":2}]"#);
        assert_eq!(s.b, Some(5));
        assert_eq!(s.rest.set(&[]).collect::<Vec<_>>(), ["z"]);
        assert!(s.rest.set(&["z"]).next().is_none());
        let s: S = serde_json::from_str(r#"{"a":1}"#).unwrap();
        assert!(s.rest.is_empty());
        let dup = serde_json::from_str::<S>(r#"{"a":1,"a":2}"#).err().unwrap();
        assert!(dup.to_string().contains("duplicate field `a`"), "{dup}");
    }

    #[test]
    fn places_become_paths() {
        assert_eq!(path_of("messages[2].content[10]"), "messages[].content[]");
        assert_eq!(path_of("tools[0]"), "tools[]");
        assert_eq!(path_of("system"), "system");
        let mut r = Request::default();
        let s: S = serde_json::from_str(r#"{"a":1,"speed":"fast","n":null}"#).unwrap();
        s.rest.note(&mut r, "", &|| String::new(), &[]);
        s.rest
            .note(&mut r, "tools[]", &|| "tools[3]".to_owned(), &[]);
        let got: Vec<(&str, &str)> = r.unmapped.iter().map(|u| (&*u.part, &*u.at)).collect();
        assert_eq!(
            got,
            [("speed", "speed"), ("tools[].speed", "tools[3].speed")]
        );
    }
}
