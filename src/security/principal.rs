//! Mutual TLS's principal: `User:` and the client certificate's subject in RFC 2253 form, as
//! Kafka's default principal builder names it (`X500Principal.getName()`): the relative
//! distinguished names last to first, joined by `,`; a multi-valued one's attributes by `+`;
//! the usual attribute keywords (CN, C, L, ST, O, OU, STREET, DC, UID), any other as its
//! dotted OID with the value's DER in hex (`#...`); special characters escaped with `\`.

use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

/// RFC 2253's attribute keywords, by OID.
const KEYWORDS: [(&str, &str); 9] = [
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// The principal of a client certificate (DER); None if it does not parse.
pub fn of_certificate(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    let dn: Vec<String> = rdns.into_iter().rev().collect();
    Some(super::user_principal(&dn.join(",")))
}

fn attribute(atv: &AttributeTypeAndValue) -> String {
    let oid = atv.attr_type().to_id_string();
    let keyword = KEYWORDS.iter().find(|(o, _)| *o == oid).map(|(_, k)| *k);
    match (keyword, atv.as_str()) {
        (Some(k), Ok(value)) => format!("{k}={}", escape(value)),
        (k, _) => format!("{}=#{}", k.unwrap_or(&oid), hex_der(atv)),
    }
}

/// The value's DER (tag, length, content) in lower-case hex.
fn hex_der(atv: &AttributeTypeAndValue) -> String {
    let value = atv.attr_value();
    let content = value.data;
    let mut der = vec![value.tag().0 as u8];
    match content.len() {
        n if n < 0x80 => der.push(n as u8),
        n => {
            let bytes: Vec<u8> = n
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            der.push(0x80 | bytes.len() as u8);
            der.extend(bytes);
        }
    }
    der.extend_from_slice(content);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 2253 §2.4: `,+"\<>;` escaped anywhere, `#` and a space at the start, a space at the end.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("carol"), "carol");
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape("#x "), "\\#x\\ ");
        assert_eq!(escape(" "), "\\ ");
    }
}
