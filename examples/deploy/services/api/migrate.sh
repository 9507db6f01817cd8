# Migrates the api database (a stand-in).
echo "migrating api schema for release $RELEASE"
sleep 0.1
echo "api migrated"
