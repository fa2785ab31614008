//! The example gateway's pending logins (step-up for unknown devices, docs/devices.md):
//! the code step acts on one only, a right and a wrong password get one code page, only
//! the right one's code confirms the device, wrong passwords never close the real code
//! step; and a breached password past its grace logins gets the change page.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_is_counted_before_it_is_checked_and_wrong_passwords_never_close_the_real_code_step()
{
    let dir = tempfile::tempdir().unwrap();
    let daemon = DaemonProcess::spawn(
        &TestConfig::embedded(&dir.path().join("data")).extra(STEP_UP_REALM).toml(),
    );
    let users = users_file(dir.path(), &["dave"]);
    let codes = dir.path().join("codes");
    std::fs::write(&codes, "dave@example.com:246810\n").unwrap();
    let args = ["--realm", "stepup", "--step-up", "--codes", codes.to_str().unwrap()];
    let gw = Gateway::spawn_with(&users, daemon.addr, &args);
    let dave = "dave@example.com";
    let pending = async |password: &str| cookie_pair(&gw.login(dave, password).await);

    // A code alone signs no one in: no pending login, no code step.
    let alone = gw.code(dave, "246810").await;
    assert_eq!(status(&alone), "401", "{alone}");
    assert!(alone.ends_with("invalid username or password"), "{alone}");

    // Three wrong codes, then the right one: in (ConfirmDevice clears the count). (A
    // right fifth code fills the window, which shuts the code step: ConfirmDevice then
    // confirms no device until the window ends, docs/devices.md.)
    let first = pending("a passphrase").await;
    for n in 0..3 {
        assert_eq!(status(&gw.code_with_cookie(&format!("00000{n}"), &first).await), "401");
    }
    let welcome = gw.code_with_cookie("246810", &first).await;
    assert_eq!(status(&welcome), "200", "the fourth try was refused: {welcome}");

    // A wrong password's page counts its codes as a real one does (five, then 429, the
    // right code too), on a decoy record of its own: the real code step stays open.
    let decoy = pending("not it").await;
    let wrong = gw.code_with_cookie("000000", &decoy).await;
    assert_eq!(status(&wrong), "401");
    assert!(wrong.ends_with("wrong code"), "{wrong}");
    for n in 1..5 {
        assert_eq!(gw.code_with_cookie(&format!("11111{n}"), &decoy).await, wrong, "{n}");
    }
    let refused = gw.code_with_cookie("246810", &decoy).await;
    assert_eq!(status(&refused), "429", "{refused}");
    assert!(refused.ends_with("too many codes: try again later"), "{refused}");
    let ghost = cookie_pair(&gw.login("ghost@example.com", "not it").await);
    for n in 0..5 {
        assert_eq!(gw.code_with_cookie(&format!("22222{n}"), &ghost).await, wrong, "ghost {n}");
    }
    assert_eq!(gw.code_with_cookie("246810", &ghost).await, refused);
    // Each wrong password's page has tries of its own: with one decoy spent, the next
    // wrong password's first code is answered as a right password's first code is (a
    // shared decoy would refuse it at once, telling the two apart).
    let another = pending("still not it").await;
    assert_eq!(gw.code_with_cookie("444444", &another).await, wrong, "a spent decoy is shared");
    let real = pending("a passphrase").await;
    let welcome = gw.code_with_cookie("246810", &real).await;
    assert_eq!(status(&welcome), "200", "wrong passwords closed the code step: {welcome}");

    // Five wrong codes on a real page use up the window (5 in 15 min): the sixth is
    // refused before it is looked at, the right code too, and the same as the decoy's.
    let real = pending("a passphrase").await;
    for n in 0..5 {
        assert_eq!(gw.code_with_cookie(&format!("33333{n}"), &real).await, wrong, "{n}");
    }
    assert_eq!(gw.code_with_cookie("246810", &real).await, refused);
}

/// A realm that asks for a second factor from a new device (bcrypt cost 4).
const STEP_UP_REALM: &str = "[realms.stepup]\nunknown_device = \"step_up\"\nhash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n";

/// The response with its `Set-Cookie` value's random part blanked: what two answers that
/// differ only by a fresh challenge id have in common.
fn without_cookie_value(response: &str) -> String {
    response
        .lines()
        .map(|l| match l.split_once('=') {
            Some((name, rest)) if l.to_ascii_lowercase().starts_with("set-cookie:") => {
                let attrs = rest.split_once(';').map_or("", |(_, a)| a);
                format!("{name}=<id>;{attrs}")
            }
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `name=value` of a `Set-Cookie` header, as a browser sends it back.
fn cookie_pair(response: &str) -> String {
    set_cookie(response).and_then(|c| c.split(';').next()).unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_device_gets_one_code_page_for_a_right_and_a_wrong_password_and_only_the_right_one_is_confirmed()
 {
    let dir = tempfile::tempdir().unwrap();
    let daemon = DaemonProcess::spawn(
        &TestConfig::embedded(&dir.path().join("data")).extra(STEP_UP_REALM).toml(),
    );
    let users = users_file(dir.path(), &["erin"]);
    let codes = dir.path().join("codes");
    std::fs::write(&codes, "erin@example.com:135790\n").unwrap();
    let args = ["--realm", "stepup", "--step-up", "--codes", codes.to_str().unwrap()];
    let gw = Gateway::spawn_with(&users, daemon.addr, &args);
    let erin = "erin@example.com";

    // A right password from a new browser: the code page, a challenge cookie, a code.
    let right = gw.login(erin, "a passphrase").await;
    assert_eq!(status(&right), "200", "{right}");
    assert!(right.contains("we sent a code"), "{right}");
    assert!(set_cookie(&right).is_some_and(|c| c.starts_with("__Host-portcullis-challenge=")));
    assert_eq!(gw.mails_settled(1).await.len(), 1, "one code for the right password");
    // A wrong password, and an account that does not exist: the same page, headers and
    // all (only the cookie's random id differs), and no code.
    let wrong = gw.login(erin, "not it").await;
    let nobody = gw.login("nobody@example.com", "not it").await;
    assert_eq!(without_cookie_value(&wrong), without_cookie_value(&right));
    assert_eq!(without_cookie_value(&nobody), without_cookie_value(&right));
    assert_ne!(cookie_pair(&wrong), cookie_pair(&right), "a fresh id each");
    assert_eq!(gw.mails_settled(1).await.len(), 1, "a code went out for a wrong password");

    // The wrong password's page: even the right code does not complete it.
    let refused = gw.code_with_cookie("135790", &cookie_pair(&wrong)).await;
    assert_eq!(status(&refused), "401", "{refused}");
    assert!(refused.ends_with("wrong code"), "{refused}");
    // The right password's page: a wrong code is refused, the right one confirms the
    // device (ConfirmDevice) and sets its cookie.
    let challenge = cookie_pair(&right);
    assert_eq!(status(&gw.code_with_cookie("000000", &challenge).await), "401");
    let welcome = gw.code_with_cookie("135790", &challenge).await;
    assert_eq!(status(&welcome), "200", "{welcome}");
    assert!(welcome.ends_with("welcome"), "{welcome}");
    let device = cookie_pair(&welcome);
    assert!(device.starts_with("__Host-portcullis-device-"), "{welcome}");
    assert!(welcome.contains("__Host-portcullis-challenge=; Max-Age=0"), "{welcome}");
    assert_eq!(header(&welcome, "cache-control"), Some("no-store"), "{welcome}");
    // The pending login is used up.
    assert_eq!(status(&gw.code_with_cookie("135790", &challenge).await), "401");

    // From that device: a plain login. A wrong password gets the code page, with a
    // device cookie or without one (a made-up one included): the gateway cannot know
    // which devices the daemon trusted, and a cookie must not turn the page into a "wrong
    // password" a checker could read.
    let again = gw.login_with_cookie(erin, "a passphrase", Some(&device)).await;
    assert_eq!(status(&again), "200", "{again}");
    assert!(again.ends_with("welcome"), "{again}");
    let typo = gw.login_with_cookie(erin, "not it", Some(&device)).await;
    assert_eq!(without_cookie_value(&typo), without_cookie_value(&right));
    let name = device.split('=').next().unwrap();
    let made_up = gw.login_with_cookie(erin, "not it", Some(&format!("{name}=garbage"))).await;
    assert_eq!(without_cookie_value(&made_up), without_cookie_value(&right));
    assert_eq!(gw.mails_settled(1).await.len(), 1, "a code for a known device");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breached_password_past_its_grace_logins_gets_the_change_page_and_no_session() {
    let dir = tempfile::tempdir().unwrap();
    use sha1::Digest;
    let corpus = dir.path().join("corpus.txt");
    let sha1 = hex::encode_upper(sha1::Sha1::digest(BREACHED.as_bytes()));
    std::fs::write(&corpus, format!("{sha1}:42\r\n")).unwrap();
    let filter = dir.path().join("breach.filter");
    portcullis::defence::breach::build::build(&corpus, &filter, &Default::default()).unwrap();
    let extra = format!(
        "[breach]\nfilter_file = {:?}\n[realms.grace]\nbreached_grace_logins = 1\n\
         hash = {{ algorithm = \"bcrypt\", bcrypt_cost = 4 }}\n",
        filter.to_str().unwrap()
    );
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("data")).extra(&extra).toml());
    let hash = StoredHash::generate(BREACHED.as_bytes(), &HashParams::Bcrypt { cost: 4 }).unwrap();
    let users = dir.path().join("users.htpasswd");
    std::fs::write(&users, format!("frank@example.com:{}\n", hash.as_str())).unwrap();
    let gw = Gateway::spawn_with(&users, daemon.addr, &["--realm", "grace"]);

    // The one grace login: in, with the device cookie, and sent to the change page.
    let first = gw.login("frank@example.com", BREACHED).await;
    assert_eq!(status(&first), "303", "{first}");
    assert!(set_cookie(&first).is_some(), "{first}");
    // The next: the change page, no session and no device cookie.
    let second = gw.login("frank@example.com", BREACHED).await;
    assert_eq!(status(&second), "303", "{second}");
    assert_eq!(header(&second, "location"), Some("/password/change"));
    assert!(second.ends_with("password change required before signing in"), "{second}");
    assert_eq!(set_cookie(&second), None, "a device cookie without a changed password");
}
