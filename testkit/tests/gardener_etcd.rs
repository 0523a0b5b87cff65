//! Gardener's own etcd deploy (gardener v1.149.3, through the `gardener-etcd` harness) against
//! the real kube-apiserver with etcd-druid's `Etcd` CRD (api v0.38.1): the shape of the `Etcd`
//! gardenlet deploys for an HA shoot, the secrets its secrets manager writes (names, labels,
//! keys, and that the certificates chain to the bundles), that a later reconcile finds the same
//! secrets, and what it does to the fields isthmus sets (issue 44). Needs
//! `scripts/build-kubernetes.sh` and `scripts/upstream-crds.sh`; the harness is built by
//! `scripts/build-gardener-harness.sh gardener-etcd` on first use. `--nocapture` prints the
//! JSON of record.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "gardener_etcd/seed.rs"]
mod seed;

use seed::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_writes_gardeners_etcd_and_secrets_and_a_reconcile_finds_them() {
    let seed = Seed::start(&[SOURCE]).await;
    let g = seed.harness(SOURCE);
    let out = g.deploy(&[]).await;
    assert!(out["before"].is_null(), "{:#}", out["before"]);
    let etcd = seed.etcd(SOURCE).await;
    println!("Etcd {SOURCE}/etcd-main as deployed: {:#}", etcd["spec"]);

    // The HA shape gardenlet deploys (botanist/etcd.go, etcd.go).
    let spec = &etcd["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(spec["priorityClassName"], "gardener-system-500");
    assert_eq!(spec["storageCapacity"], "25Gi");
    assert_eq!(spec["volumeClaimTemplate"], "main-etcd");
    assert!(spec["backup"]["store"].is_null(), "no backup bucket");
    let annotations = &etcd["metadata"]["annotations"];
    assert_eq!(annotations["gardener.cloud/operation"], "reconcile");
    assert!(annotations["gardener.cloud/timestamp"].is_string());
    let tls = &spec["etcd"];
    let (client, peer) = (&tls["clientUrlTls"], &tls["peerUrlTls"]);
    for (r, prefix) in [
        (&client["tlsCASecretRef"]["name"], "ca-etcd-bundle-"),
        (&client["serverTLSSecretRef"]["name"], "etcd-server-main-"),
        (&client["clientTLSSecretRef"]["name"], "etcd-client-"),
        (&peer["tlsCASecretRef"]["name"], "ca-etcd-peer-bundle-"),
        (
            &peer["serverTLSSecretRef"]["name"],
            "etcd-peer-server-main-",
        ),
    ] {
        assert!(
            r.as_str().unwrap().starts_with(prefix),
            "{r} is not {prefix}<hash>"
        );
    }
    assert_eq!(client["tlsCASecretRef"]["dataKey"], "bundle.crt");
    assert_eq!(peer["tlsCASecretRef"]["dataKey"], "bundle.crt");
    assert!(peer.get("skipClientSANVerification").is_none());
    assert!(tls.get("additionalAdvertisePeerURLs").is_none());
    assert_eq!(
        spec["backup"]["tls"], *client,
        "backup-restore uses the client TLS"
    );
    for (kind, exists) in out["objects"].as_object().unwrap() {
        assert_eq!(exists, &json!(true), "{kind} not written");
    }

    // The secrets, found the way a reader must find them: by the secrets manager's labels.
    let secrets = seed.gardener_secrets(SOURCE).await;
    print_secrets(&secrets);
    let client_cert = by_label(&secrets, "name", "etcd-client");
    assert_eq!(client_cert.len(), 1);
    let client_cert = client_cert[0];
    assert_eq!(
        json!(client_cert.metadata.name),
        client["clientTLSSecretRef"]["name"]
    );
    assert_eq!(client_cert.immutable, Some(true));
    assert_eq!(keys(client_cert), ["tls.crt", "tls.key"]);
    let bundle = by_label(&secrets, "bundle-for", "ca-etcd");
    assert_eq!(bundle.len(), 1);
    assert_eq!(
        json!(bundle[0].metadata.name),
        client["tlsCASecretRef"]["name"]
    );
    assert_eq!(keys(bundle[0]), ["bundle.crt"]);
    // Each certificate chains to the bundle its Etcd reference names (openssl verify).
    let named = |n: &Value| secret_named(&secrets, n.as_str().unwrap());
    verify_chain(
        named(&client["tlsCASecretRef"]["name"]),
        "bundle.crt",
        client_cert,
    );
    verify_chain(
        named(&client["tlsCASecretRef"]["name"]),
        "bundle.crt",
        named(&client["serverTLSSecretRef"]["name"]),
    );
    verify_chain(
        named(&peer["tlsCASecretRef"]["name"]),
        "bundle.crt",
        named(&peer["serverTLSSecretRef"]["name"]),
    );

    // A later shoot reconcile: a new secrets manager finds the same secrets, the spec is the
    // same (the generation does not move), only the reconcile request is written again.
    let again = g.redeploy(&[]).await;
    let after = seed.etcd(SOURCE).await;
    assert_eq!(uids(&seed.gardener_secrets(SOURCE).await), uids(&secrets));
    assert_eq!(
        after["metadata"]["generation"],
        etcd["metadata"]["generation"]
    );
    assert_eq!(after["spec"], etcd["spec"]);
    assert_eq!(again["secretsManager"], out["secretsManager"]);
    println!("secrets manager hands out: {:#}", again["secretsManager"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_wipes_the_fields_isthmus_sets() {
    let seed = Seed::start(&[SOURCE, DESTINATION]).await;

    // Source: isthmus exposes the members (controller/src/gardener.rs etcd_body, field
    // manager "isthmus"); the next shoot reconcile runs Deploy.
    let source = seed.harness(SOURCE);
    source.deploy(&[]).await;
    seed.apply_as_isthmus(&json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": SOURCE},
        "spec": {"etcd": {
            "additionalAdvertisePeerURLs": advertised(SOURCE, "", 3),
            "peerUrlTls": {"skipClientSANVerification": true},
        }},
    }))
    .await;
    let exposed = seed.etcd(SOURCE).await;
    let out = source.redeploy(&[]).await;
    let wiped = seed.etcd(SOURCE).await;
    print_before_after("source", &exposed, &wiped);
    assert_eq!(out["before"]["spec"], exposed["spec"]);
    assert!(wiped["spec"]["etcd"]
        .get("additionalAdvertisePeerURLs")
        .is_none());
    assert!(wiped["spec"]["etcd"]["peerUrlTls"]
        .get("skipClientSANVerification")
        .is_none());
    assert_eq!(
        generation(&wiped),
        generation(&exposed) + 1,
        "a spec change for druid"
    );

    // Destination: isthmus creates the Etcd from the source's template with 2 replicas, the
    // seed's member-name prefix (druid refuses bootstrap members that could collide with the
    // new ones), the bootstrap block and its own exposure; the destination's shoot reconcile
    // runs Deploy.
    let mut spec = exposed["spec"].clone();
    retarget_secret_refs(&mut spec, SOURCE, DESTINATION);
    spec["replicas"] = json!(2);
    spec["memberNamePrefix"] = json!("seed-b");
    spec["etcd"]["additionalAdvertisePeerURLs"] = advertised(DESTINATION, "seed-b-", 2);
    spec["etcd"]["bootstrapWithExistingCluster"] = json!({
        "members": (0..3).map(|i| json!({
            "name": format!("etcd-main-{i}"),
            "peerUrls": [format!("https://etcd-main-{i}.{SOURCE}.seed-a.example:{}", 2380 + i)],
        })).collect::<Vec<_>>(),
        "clientEndpoints": [format!("https://etcd-main-client.{SOURCE}.svc:2379")],
    });
    seed.apply_as_isthmus(&json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": DESTINATION,
                     "labels": exposed["metadata"]["labels"]},
        "spec": spec,
    }))
    .await;
    let created = seed.etcd(DESTINATION).await;
    seed.harness(DESTINATION).deploy(&[]).await;
    let deployed = seed.etcd(DESTINATION).await;
    print_before_after("destination", &created, &deployed);
    let (before, after) = (&created["spec"], &deployed["spec"]);
    assert_eq!(
        (before["replicas"].clone(), after["replicas"].clone()),
        (json!(2), json!(3))
    );
    assert!(after["etcd"].get("additionalAdvertisePeerURLs").is_none());
    assert!(after["etcd"]["peerUrlTls"]
        .get("skipClientSANVerification")
        .is_none());
    // v1.149.3 is built on etcd-druid api v0.37.1, whose EtcdConfig has no
    // bootstrapWithExistingCluster: a field its Go type does not know is in neither side of
    // the merge patch, so it survives. (v1.149.3 does not compile on api v0.38.1, which drops
    // DisableEtcdRuntimeComponentCreationAnnotation; a gardenlet on an API that knows the
    // field assigns a spec.etcd without it, as it does for additionalAdvertisePeerURLs.)
    assert_eq!(
        after["etcd"]["bootstrapWithExistingCluster"],
        before["etcd"]["bootstrapWithExistingCluster"]
    );
    // Deploy writes its own secrets in the destination namespace.
    let refs = &after["etcd"]["clientUrlTls"]["clientTLSSecretRef"];
    assert_eq!(refs["namespace"], DESTINATION);
    assert!(!by_label(
        &seed.gardener_secrets(DESTINATION).await,
        "name",
        "etcd-client"
    )
    .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardeners_oracles_and_scale() {
    let seed = Seed::start(&[SOURCE]).await;
    let g = seed.harness(SOURCE);
    let out = g.deploy(&[]).await;
    let ts = out["timestamp"].as_str().unwrap().to_owned();

    // Nothing has reconciled it yet.
    let a = g.check(Some(&ts)).await;
    println!("check before druid: {:#}", a.json);
    assert_eq!(a.code, 1);
    assert_eq!(a.json["healthy"], false);
    assert_contains(
        &a.json["checks"]["checkEtcdObject"]["error"],
        "observed generation not recorded",
    );
    assert_contains(&a.json["checks"]["checkEtcd"]["error"], "is not ready yet");
    let w = g.wait(Some(&ts), "100ms", "1s").await;
    assert_eq!(
        (w.code, w.json["ready"].clone()),
        (1, json!(false)),
        "{:#}",
        w.json
    );
    // gardenlet's Scale refuses while its reconcile request is pending.
    let s = g.scale(0, Some(&ts)).await;
    assert_eq!(s.code, 1, "{:#}", s.json);
    assert_contains(&s.json["result"]["error"], "still has operation annotation");

    // What etcd-druid writes when it is done, but without AllMembersUpdated: Gardener's waiter
    // requires the condition present (isthmus accepts it absent).
    seed.druid_done(SOURCE, &[("Ready", "True")]).await;
    let a = g.check(Some(&ts)).await;
    assert_eq!(a.code, 1, "{:#}", a.json);
    assert_contains(
        &a.json["checks"]["checkEtcdObject"]["error"],
        "AllMembersUpdated is not present",
    );
    assert_eq!(a.json["checks"]["checkEtcd"]["ok"], true);
    seed.druid_done(SOURCE, &[("Ready", "True"), ("AllMembersUpdated", "True")])
        .await;
    let a = g.check(Some(&ts)).await;
    println!("check after druid: {:#}", a.json);
    assert_eq!(
        (a.code, a.json["healthy"].clone()),
        (0, json!(true)),
        "{:#}",
        a.json
    );
    let w = g.wait(Some(&ts), "100ms", "10s").await;
    assert_eq!(
        (w.code, w.json["ready"].clone()),
        (0, json!(true)),
        "{:#}",
        w.json
    );

    // Anyone else writing gardener.cloud/timestamp breaks gardenlet's next step: its waiter
    // and its Scale compare it with the value gardenlet last wrote.
    seed.annotate(SOURCE, "gardener.cloud/timestamp", "2026-08-01T00:00:00Z")
        .await;
    let a = g.check(Some(&ts)).await;
    assert_eq!(a.code, 1);
    assert_eq!(a.json["checks"]["timestamp"]["ok"], false, "{:#}", a.json);
    let s = g.scale(0, Some(&ts)).await;
    assert_eq!(s.code, 1, "{:#}", s.json);
    assert_contains(&s.json["result"]["error"], "gardener.cloud/timestamp");

    seed.annotate(SOURCE, "gardener.cloud/timestamp", &ts).await;
    let s = g.scale(0, Some(&ts)).await;
    assert_eq!(s.code, 0, "{:#}", s.json);
    let after = seed.etcd(SOURCE).await;
    assert_eq!(after["spec"]["replicas"], 0);
    assert_eq!(
        after["metadata"]["annotations"]["gardener.cloud/operation"],
        "reconcile"
    );
    assert_ne!(
        after["metadata"]["annotations"]["gardener.cloud/timestamp"],
        json!(ts)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_rotation_renames_the_client_secret_and_the_bundle() {
    let seed = Seed::start(&[SOURCE]).await;
    let g = seed.harness(SOURCE);
    let refs = |etcd: &Value| {
        let c = &etcd["spec"]["etcd"]["clientUrlTls"];
        (
            c["clientTLSSecretRef"]["name"].as_str().unwrap().to_owned(),
            c["tlsCASecretRef"]["name"].as_str().unwrap().to_owned(),
        )
    };
    g.deploy(&[]).await;
    let (client0, bundle0) = refs(&seed.etcd(SOURCE).await);
    let old_client = secret_named(&seed.gardener_secrets(SOURCE).await, &client0).clone();

    // The shoot's CA rotation, reconcile by reconcile (lastInitiationTime and phase from the
    // Shoot's status). Preparing's RolloutPeerCA waits for etcd-druid, which does not run
    // here; Prepared's reconcile is the same Deploy without it.
    let started = ["--ca-rotation-started", "2026-08-01T00:00:00Z", "--cleanup"];
    let prepared = [&["--ca-rotation-phase", "Prepared"][..], &started].concat();
    g.redeploy(&prepared).await;
    let (client1, bundle1) = refs(&seed.etcd(SOURCE).await);
    let secrets1 = seed.gardener_secrets(SOURCE).await;
    println!("after Prepared: client {client1}, bundle {bundle1}");
    print_secrets(&secrets1);
    assert_ne!(bundle1, bundle0, "the bundle carries the new CA too");
    // Client certificates move to the new CA at once (server certificates at Completing):
    // a new name, the old secret deleted by the Cleanup at the end of this reconcile.
    assert_ne!(client1, client0);
    assert!(!uids(&secrets1).iter().any(|(n, _)| *n == client0));
    let both = secret_named(&secrets1, &bundle1);
    verify_chain(both, "bundle.crt", secret_named(&secrets1, &client1));
    verify_chain(both, "bundle.crt", &old_client);

    let completing = [&["--ca-rotation-phase", "Completing"][..], &started].concat();
    g.redeploy(&completing).await;
    let (client2, bundle2) = refs(&seed.etcd(SOURCE).await);
    let secrets2 = seed.gardener_secrets(SOURCE).await;
    println!("after Completing: client {client2}, bundle {bundle2}");
    print_secrets(&secrets2);
    assert_eq!(client2, client1);
    assert_ne!(bundle2, bundle1, "the old CA leaves the bundle");
    let names: Vec<_> = uids(&secrets2).into_iter().map(|(n, _)| n).collect();
    assert!(
        !names.contains(&client0) && !names.contains(&bundle0),
        "{names:?}"
    );
    verify_chain(
        secret_named(&secrets2, &bundle2),
        "bundle.crt",
        secret_named(&secrets2, &client2),
    );
    let (old_chains, _) = chains(secret_named(&secrets2, &bundle2), "bundle.crt", &old_client);
    assert!(
        !old_chains,
        "the old client certificate is no longer trusted"
    );
    assert_eq!(by_label(&secrets2, "name", "etcd-client").len(), 1);
    assert_eq!(by_label(&secrets2, "bundle-for", "ca-etcd").len(), 1);
}
