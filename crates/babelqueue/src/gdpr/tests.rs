use serde_json::{Value, json};

use super::*;

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "order_id": {"type": "integer"},
        "email": {"type": "string", "x-gdpr-sensitive": "contact"},
        "profile": {"type": "object", "properties": {
            "full_name": {"type": "string", "x-gdpr-sensitive": true},
            "plan": {"type": "string"},
        }},
        "addresses": {"type": "array", "items": {"type": "object", "properties": {
            "line": {"type": "string", "x-gdpr-sensitive": true},
            "city": {"type": "string"},
        }}},
    }})
}

fn cipher() -> AesGcmCipher {
    AesGcmCipher::new(&[9u8; 32]).unwrap()
}

#[test]
fn protect_replaces_each_marked_leaf_and_unprotect_restores_it() {
    let original = json!({
        "order_id": 1042,
        "email": "alice@example.com",
        "profile": {"full_name": "Alice Ünal", "plan": "gold"},
        "addresses": [{"line": "1 Rue", "city": "Paris"}, {"city": "Lyon"}, {"line": 7}],
    });
    let mut data = original.clone();
    assert_eq!(protect(&mut data, &schema(), &cipher()).unwrap(), 4);
    assert_eq!(data["order_id"], 1042);
    assert_eq!(data["profile"]["plan"], "gold");
    assert_eq!(data["addresses"][0]["city"], "Paris");
    assert_eq!(data["addresses"][1], json!({"city": "Lyon"}));
    for leaf in [
        &data["email"],
        &data["profile"]["full_name"],
        &data["addresses"][0]["line"],
        &data["addresses"][2]["line"],
    ] {
        assert!(leaf.is_string());
        assert!(!leaf.as_str().unwrap().contains("Alice"));
    }
    assert_eq!(unprotect(&mut data, &schema(), &cipher()).unwrap(), 4);
    assert_eq!(data, original);
    // A second run finds cleartext strings it cannot open: only non-strings are left alone.
    let mut numbers = json!({"addresses": [{"line": 7}], "profile": {"full_name": null}});
    assert_eq!(unprotect(&mut numbers, &schema(), &cipher()).unwrap(), 0);
    assert_eq!(
        numbers,
        json!({"addresses": [{"line": 7}], "profile": {"full_name": null}})
    );
}

#[test]
fn the_frame_of_a_missing_or_differently_shaped_value_is_skipped() {
    for data in [
        json!({}),
        json!({"profile": "not an object", "addresses": {"line": "x"}}),
        json!({"addresses": ["a", 1, null]}),
    ] {
        let mut protected = data.clone();
        assert_eq!(protect(&mut protected, &schema(), &cipher()).unwrap(), 0);
        assert_eq!(protected, data);
    }
}

#[test]
fn a_marked_container_is_encrypted_whole_and_marks_inside_it_add_nothing() {
    let schema = json!({"x-gdpr-sensitive": true, "properties": {
        "profile": {"x-gdpr-sensitive": "identity", "properties": {
            "full_name": {"x-gdpr-sensitive": true},
        }},
        "tags": {"type": "array", "items": {"x-gdpr-sensitive": true}},
    }});
    let original = json!({"profile": {"full_name": "Bob", "z": [1.5, {"b": 1, "a": 2}]}, "tags": ["x", {"k": 1}], "id": 3});
    let mut data = original.clone();
    assert_eq!(protect(&mut data, &schema, &cipher()).unwrap(), 3);
    assert!(data["profile"].is_string());
    assert!(data["tags"][0].is_string() && data["tags"][1].is_string());
    assert_eq!(data["id"], 3);
    let plaintext = cipher().decrypt(data["profile"].as_str().unwrap()).unwrap();
    assert_eq!(
        String::from_utf8(plaintext).unwrap(),
        r#"{"full_name":"Bob","z":[1.5,{"a":2,"b":1}]}"#,
        "canonical JSON: sorted keys at every depth, no whitespace"
    );
    unprotect(&mut data, &schema, &cipher()).unwrap();
    assert_eq!(data, original);
}

#[test]
fn a_dotted_property_name_and_arrays_of_arrays_are_protected() {
    let schema = json!({"properties": {
        "a.b": {"x-gdpr-sensitive": true},
        "matrix": {"items": {"items": {"x-gdpr-sensitive": true}}},
    }});
    let original =
        json!({"a.b": "secret", "a": {"b": "not marked"}, "matrix": [["x", "y"], ["z"]]});
    let mut data = original.clone();
    assert_eq!(protect(&mut data, &schema, &cipher()).unwrap(), 4);
    assert_ne!(data["a.b"], "secret");
    assert_eq!(data["a"]["b"], "not marked");
    assert!(data["matrix"][1][0].is_string() && data["matrix"][1][0] != "z");
    unprotect(&mut data, &schema, &cipher()).unwrap();
    assert_eq!(data, original);
}

#[test]
fn decrypt_failures_are_typed_and_name_the_field_never_the_value() {
    let mut foreign = json!({"addresses": [{"line": "ok"}, {"line": "clear text"}]});
    let sealed = cipher().encrypt(br#""1 Rue""#).unwrap();
    foreign["addresses"][0]["line"] = Value::String(sealed.clone());
    let error = unprotect(&mut foreign, &schema(), &cipher()).unwrap_err();
    assert!(error.is_decrypt());
    assert_eq!(error.pointer(), "/addresses/1/line");
    assert!(matches!(
        &error,
        Error::Decrypt {
            source: CipherError::NotBase64,
            ..
        }
    ));
    assert!(!polyq_amqp::error_chain(&error).contains("clear text"));

    let other = AesGcmCipher::new(&[1u8; 16]).unwrap();
    let mut wrong_key = json!({"email": sealed});
    let error = unprotect(&mut wrong_key, &schema(), &other).unwrap_err();
    assert!(matches!(&error, Error::Decrypt { source, .. } if source.is_unauthenticated()));

    let mut not_json = json!({"email": cipher().encrypt(b"not json").unwrap()});
    let error = unprotect(&mut not_json, &schema(), &cipher()).unwrap_err();
    assert!(matches!(error, Error::NotJson { .. }) && error.is_decrypt());
}

#[test]
fn the_reference_cipher_frames_nonce_ciphertext_tag_in_padded_base64() {
    use base64::Engine as _;
    for len in [16, 24, 32] {
        let key = vec![len as u8; len];
        let cipher = AesGcmCipher::new(&key).unwrap();
        let first = cipher.encrypt(b"\"x\"").unwrap();
        let second = cipher.encrypt(b"\"x\"").unwrap();
        assert_ne!(first, second, "a fresh nonce per value");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&first)
            .unwrap();
        assert_eq!(raw.len(), 12 + 3 + 16);
        assert_eq!(first.len() % 4, 0);
        assert_eq!(cipher.decrypt(&first).unwrap(), b"\"x\"");
        let mut tampered = raw.clone();
        tampered[14] ^= 1;
        let tampered = base64::engine::general_purpose::STANDARD.encode(tampered);
        assert!(cipher.decrypt(&tampered).unwrap_err().is_unauthenticated());
    }
    for len in [0, 15, 17, 31, 33, 64] {
        assert_eq!(
            AesGcmCipher::new(&vec![0; len]).unwrap_err(),
            CipherError::KeyLength(len)
        );
    }
    assert_eq!(
        cipher().decrypt("AAAA").unwrap_err(),
        CipherError::TooShort(3)
    );
    assert_eq!(
        cipher().decrypt("not base64!").unwrap_err(),
        CipherError::NotBase64
    );
}

#[test]
fn a_ring_encrypts_with_its_current_key_and_decrypts_with_any() {
    let retired = AesGcmCipher::new(&[1u8; 24]).unwrap();
    let old = retired.encrypt(b"1").unwrap();
    let ring = AesGcmCipher::new(&[2u8; 32])
        .unwrap()
        .with_retired_key(&[1u8; 24])
        .unwrap();
    assert_eq!(ring.decrypt(&old).unwrap(), b"1");
    let new = ring.encrypt(b"2").unwrap();
    assert!(retired.decrypt(&new).unwrap_err().is_unauthenticated());
    let debug = format!("{ring:?}");
    assert_eq!(debug, "AesGcmCipher { key_bits: [256, 192] }");
}
