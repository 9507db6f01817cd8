# Builds the web front end (a stand-in).
echo "building web for release $RELEASE"
sleep 0.3
echo "web built"
