//! The store's inputs are newtypes, so bad values are refused before a store is called. This
//! checks that refusal at the edge where a `TagSpec` is built, once, for every backend.

use idmint_core::limits::{DESCRIPTION_LEN_MAX, STEP_MAX};
use idmint_core::{Description, StartId, Step, Tag, ValueError};

#[test]
fn a_tag_spec_cannot_hold_a_bad_value() {
    assert_eq!(Step::new(0), Err(ValueError::Step { got: 0 }));
    assert_eq!(Step::new(STEP_MAX + 1), Err(ValueError::Step { got: STEP_MAX + 1 }));
    assert_eq!(StartId::new(0), Err(ValueError::StartId { got: 0 }));
    assert!(StartId::new(StartId::MAX + 1).is_err(), "no room left for one largest step");
    let too_long = "d".repeat(DESCRIPTION_LEN_MAX + 1);
    assert_eq!(
        Description::new(&too_long),
        Err(ValueError::Description { len: DESCRIPTION_LEN_MAX + 1 })
    );
    assert!(Tag::parse("has\ttab").is_err());
    assert!(Tag::parse("").is_err());
}
