//! Whether a statement may set the session's role. MariaDB 10.11 keeps a role set with `SET ROLE`
//! across `COM_RESET_CONNECTION` and `COM_CHANGE_USER` (checked on the server), so a pooled backend
//! connection whose session may have one is closed instead of reused (`frontend::pool`).
//!
//! Allowed to be wrong only in the safe direction: `SET ... ROLE` anywhere (also after `SET STATEMENT
//! ... FOR`, in a multi-statement or an executable comment), or `role` inside a string literal (the
//! text of `PREPARE s FROM '...'` or `EXECUTE IMMEDIATE '...'`), or anything the lexer cannot read.

use super::lexer::{is_word, SpelledTokens, TokenKind};
use super::Quoting;

/// Whether running `statement` may leave the session with a role set.
pub fn may_set_role(statement: &[u8], quoting: Quoting) -> bool {
    let mut tokens = SpelledTokens::new(statement, quoting);
    let mut after_set = false;
    loop {
        let token = tokens.next();
        match token.0 {
            TokenKind::Eof => return false,
            TokenKind::Invalid => return true,
            TokenKind::String if token.1.windows(4).any(|w| w.eq_ignore_ascii_case(b"role")) => {
                return true
            }
            _ if after_set && is_word(token, "ROLE") => return true,
            _ => {}
        }
        after_set = is_word(token, "SET");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn may(sql: &str) -> bool {
        may_set_role(sql.as_bytes(), Quoting::DEFAULT)
    }

    #[test]
    fn role_setting_statements() {
        assert!(may("SET ROLE r"));
        assert!(may("set role NONE"));
        assert!(may("SET /* why */ ROLE r"));
        assert!(may("SELECT 1; SET ROLE r"));
        assert!(may("SET STATEMENT max_statement_time=1 FOR SET ROLE r"));
        assert!(may("/*!100000 SET ROLE r */"));
        assert!(may("PREPARE s FROM 'SET ROLE r'"));
        assert!(may("EXECUTE IMMEDIATE 'set role r'"));
        assert!(may("SET 'unterminated"));
    }

    #[test]
    fn other_statements() {
        assert!(!may("SELECT CURRENT_ROLE()"));
        assert!(!may("SELECT role FROM users"));
        assert!(!may("SET @role = 1"));
        assert!(!may("SET autocommit = 0"));
        assert!(!may("INSERT INTO t (roles) VALUES (1)"));
        assert!(!may("GRANT r TO u"));
    }
}
