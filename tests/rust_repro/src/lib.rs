//! Empty: the reproducers live in tests/.
