# Builds the api service (a stand-in: prints where it runs and what it builds).
echo "building api ($TARGET) for release $RELEASE in $(basename "$PWD")"
sleep 0.2
echo "api built"
