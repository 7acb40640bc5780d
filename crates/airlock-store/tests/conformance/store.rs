//! The store itself: readiness and run notifications.

use std::time::Duration;

use airlock_store::*;

use crate::new_run;

async fn api_7_ready_reports_current_schema(store: Store) {
    assert!(store.ready().await.unwrap());
}
both!(api_7_ready_reports_current_schema);

async fn ops_2_queueing_a_run_notifies_listeners_on_postgres(store: Store) {
    let listener = store.subscribe().await.unwrap();
    match (store.backend(), listener) {
        (Backend::Sqlite, None) => {}
        (Backend::Postgres, Some(mut l)) => {
            let run = store.create_run(new_run("hello")).await.unwrap().run;
            let n = tokio::time::timeout(Duration::from_secs(10), l.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(n.payload(), run.id);
        }
        (b, l) => panic!("{b:?} listener {}", l.is_some()),
    }
}
both!(ops_2_queueing_a_run_notifies_listeners_on_postgres);
